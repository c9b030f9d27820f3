"""A client of a Phalanx server's REST API (``rest.client``): requests with the caller's token, refusals as errors.

httpx is the ``remote`` extra: nothing outside this package imports it for a remote server.
"""
