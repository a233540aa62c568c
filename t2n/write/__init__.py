"""Write: the built graph serialised as an NNEF archive (text, weights, formats, staging)."""
