"""The client's defaults, in one place (the constructors and the CLI read them from here)."""

from __future__ import annotations

from .. import contract, defaults

# -- where the server is
DEFAULT_PROTOCOL = "grpc"
DEFAULT_HOST = "localhost"
# Triton's standard ports; a URL without a port gets the one of its protocol.
DEFAULT_PORTS = {"grpc": 8001, "http": 8000}
DEFAULT_URL = f"{DEFAULT_HOST}:{DEFAULT_PORTS[DEFAULT_PROTOCOL]}"
DEFAULT_MODEL = contract.DEFAULT_MODEL

# -- time
# Per request (one batch of sentences). Generous: a beam search over 32 long sentences on a
# CPU server takes seconds, and a request that timed out is not retried.
DEFAULT_TIMEOUT = defaults.CLIENT_TIMEOUT_S
# Connecting is quick or it fails: a server that does not accept within this is not there.
CONNECT_TIMEOUT = 10.0

# -- retries (transient failures only: server unavailable, connection refused or reset)
DEFAULT_MAX_RETRIES = 3
# Exponential backoff: 0.5, 1, 2, 4, 8, 8 ... seconds, each shortened by up to 25% at random
# so that clients that failed together do not come back together (the openai-python rule).
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 8.0
RETRY_JITTER = 0.25
# gRPC reconnects a broken channel on its own schedule (1 s, then x1.6 up to 120 s by default);
# a channel still waiting out that schedule fails calls at once even after the server is back,
# which would waste our retries. Keep its schedule no slower than ours.
GRPC_RECONNECT_BACKOFF_MS = {"initial": 100, "min": 100, "max": 2000}

# -- batching
DEFAULT_BATCH_SIZE = defaults.CLIENT_BATCH_SIZE  # sentences per request
DEFAULT_MAX_BATCH_TOKENS = None  # no token budget
DEFAULT_CONCURRENCY = defaults.CLIENT_CONCURRENCY  # requests in flight
# Sentences are sorted by length within a window of this many requests' worth of input, so
# that each request holds sentences of similar length (less padding on the server) while the
# output can still stream in input order, window after window.
SORT_WINDOW_REQUESTS = 16

# -- the server contract: its tensor names are nmtserve.contract's (dependency-free)
INPUT_TEXT, OUTPUT_TRANSLATION, OUTPUT_SCORE = contract.TEXT, contract.TRANSLATION, contract.SCORE
OUTPUT_WARNING = contract.WARNING
OUTPUTS_PARAMETER = contract.OUTPUTS_PARAMETER  # a request parameter: the outputs the request reads
INPUT_BEAM_SIZE, INPUT_MAX_LENGTH = contract.BEAM_SIZE, contract.MAX_LENGTH
INPUT_LENGTH_PENALTY, INPUT_NUM_HYPOTHESES = contract.LENGTH_PENALTY, contract.NUM_HYPOTHESES
INPUT_EARLY_STOPPING = contract.EARLY_STOPPING
INPUT_ALIGN, OUTPUT_ALIGNMENT = contract.ALIGN, contract.ALIGNMENT
INPUT_CONFIDENCE, OUTPUT_SENTENCE_CONFIDENCE = contract.CONFIDENCE, contract.SENTENCE_CONFIDENCE
OUTPUT_WORD_CONFIDENCE, OUTPUT_MISSING_WORDS = contract.WORD_CONFIDENCE, contract.MISSING_WORDS
OUTPUT_NBEST_TRANSLATION, OUTPUT_NBEST_SCORE = contract.NBEST_TRANSLATION, contract.NBEST_SCORE
INPUT_SOURCE_LANG, INPUT_TARGET_LANG = contract.SOURCE_LANG, contract.TARGET_LANG
INPUT_TARGET_PREFIX = contract.TARGET_PREFIX
INPUT_SPLIT_SENTENCES = contract.SPLIT_SENTENCES
INPUT_TERMS = contract.TERMS
INPUT_NO_REPEAT_NGRAM_SIZE, INPUT_REPETITION_PENALTY = contract.NO_REPEAT_NGRAM_SIZE, contract.REPETITION_PENALTY
INPUT_MIN_LENGTH, INPUT_DISABLE_UNK = contract.MIN_LENGTH, contract.DISABLE_UNK
INPUT_SUPPRESS_SEQUENCES = contract.SUPPRESS_SEQUENCES
OPTION_INPUT_NAMES = tuple(contract.OPTION_INPUTS)
SENTENCE_IN_MESSAGE = contract.SENTENCE_IN_MESSAGE
PAIRS_PARAMETER, LANGUAGES_PARAMETER = contract.PAIRS_PARAMETER, contract.LANGUAGES_PARAMETER
PAIR_PARAMETER = contract.PAIR_PARAMETER
INPUT_DOCUMENT, INPUT_FORMAT, OUTPUT_SENTENCES = contract.DOCUMENT, contract.FORMAT, contract.SENTENCES
DOCUMENT_FORMATS, DOCUMENT_MODEL_SUFFIX = contract.DOCUMENT_FORMATS, contract.DOCUMENT_MODEL_SUFFIX
FILE_FORMATS, document_format_of = contract.FILE_FORMATS, contract.document_format_of

# -- health
READY_POLL_INTERVAL = 0.2
PROBE_TIMEOUT = 5.0  # one health request
DEFAULT_READY_TIMEOUT = 30.0

# -- the CLI (`nmtserve translate`)
# A progress bar only for inputs that take a while: from this many sentences when stderr is a
# terminal, and from PROGRESS_LARGE_INPUT when it is not (a log file gets an update every
# PROGRESS_LOG_INTERVAL seconds rather than a flood of carriage returns).
PROGRESS_MIN_SENTENCES = 200
PROGRESS_LARGE_INPUT = 20_000
PROGRESS_LOG_INTERVAL = 30.0
