"""Defaults several layers share, written once (dependency-free: the CLI's --help imports it)."""

BEAM_SIZE = 4  # the beam width served and searched when a request or an option does not set one
MAX_BATCH = 64  # sentences decoding together (the export's --max-batch; the TensorRT profile's batch)
