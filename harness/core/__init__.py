"""Floor 0, what every suite stands on: the record contract and its vocabulary (records), run
files (runfiles), the case shape (cases), the sandbox (isolate), the small models (models)."""
