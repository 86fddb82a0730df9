"""The only modules that talk to an API server (kopf's own watches aside).

Everything above this layer passes and receives plain JSON objects (``Body``) or pydantic
models, and sees errors as :mod:`fleet.clients.errors` exceptions, never the client library's.
"""
