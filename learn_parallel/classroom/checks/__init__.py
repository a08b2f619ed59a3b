"""One module per chapter, each registering its exercises' checks with `exercise`."""
