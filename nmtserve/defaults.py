"""Defaults several layers share, written once (dependency-free: the CLI's --help imports it)."""

BEAM_SIZE = 4  # the beam width served and searched when a request or an option does not set one
MAX_BATCH = 64  # sentences decoding together (the export's --max-batch; the TensorRT profile's batch)

# Serving limits (0 disables one): what one request may hold, and what waits to decode. The
# export writes them into the repository's configs; the Triton models read them from there.
MAX_REQUEST_SENTENCES = 1024  # sentences per request (tokenize, translate_document's chunks)
MAX_SENTENCE_CHARS = 4096  # characters per sentence
MAX_DOCUMENT_CHARS = 1_000_000  # characters per translate_document request
MAX_QUEUED_SENTENCES = 2048  # sentences waiting to join the decoding batch; more are UNAVAILABLE "server busy"
QUEUE_TIMEOUT_S = 60.0  # seconds a request may wait for decoding to start

# The client (Translator, `nmtserve translate`): sentences per request, requests in flight, and
# seconds per request (generous: a beam search over 32 long sentences on a CPU takes seconds).
CLIENT_BATCH_SIZE = 32
CLIENT_CONCURRENCY = 4
CLIENT_TIMEOUT_S = 60.0
