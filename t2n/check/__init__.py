"""Check: the archive loaded and run by its engine, compared with PyTorch on several input sets."""
