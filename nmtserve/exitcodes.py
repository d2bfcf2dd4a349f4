"""The exit statuses of every ``nmtserve`` command (the application CLI and the client's)."""

EXIT_OK = 0  # everything done
EXIT_ERROR = 1  # the work failed (a translation, an export check, a server that died)
EXIT_USAGE = 2  # bad usage or input (options, files, lines the server rejected, unknown model)
EXIT_UNAVAILABLE = 3  # the server could not be reached
EXIT_INCOMPLETE = 4  # every line translated, but the server warned that some may be incomplete or wrong (see stderr)
