"""The gateway: LibreTranslate's and DeepL's HTTP APIs and a web page, on top of Triton.

An ASGI process (Starlette on uvicorn) that reaches Triton only through
``nmtserve.client.AsyncTranslator``, so it runs apart from the GPU servers and takes the
client's replicas, failover, TLS and headers as they are. ``nmtserve gateway --url ...`` runs
it; ``nmtserve serve --gateway-port 5000`` starts it beside Triton.

    app.py             the ASGI app: routes, CORS, the page and its static files
    libretranslate.py  LibreTranslate's API (/translate, /detect, /languages, files, ...)
    deepl.py           DeepL's API v2 subset (/v2/translate, /v2/languages)
    service.py         what both share: languages, detection, the sentence and document paths
    languages.py       which languages the server serves (``discover``) and their names
    detect.py          language detection (lingua): which served source, or surely none of them
    access.py          API keys and per-key rate limits
    params.py          a request's fields from JSON, forms or multipart, size-bounded
    files.py           translated files waiting for download
    errors.py          the errors both APIs answer, each in its own shape
    config.py          settings and defaults, the --api-keys file
    cli.py, sidecar.py `nmtserve gateway`; the gateway as a child of `nmtserve serve --gateway-port`
    static/            the page: HTML, CSS and JavaScript, no build step, nothing from a CDN

This package imports nothing on its own (``nmtserve --help`` reads ``config`` for its defaults
without the gateway's dependencies): ``from nmtserve.gateway.app import create_app``.
"""
