"""Walk: the captured graph's ops mapped one by one into the NNEF graph under construction."""
