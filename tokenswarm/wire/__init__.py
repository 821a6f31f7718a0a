"""One request on the wire: send it, read the stream, date each delivery, build the record.

Client and the transport seam it sends through (``transport``), connection pool, hub reader
and timing adapter, SSE and de-chunking, chunk JSON, engine-specific fields, kernel stamps, the
wall-clock anchor and the optional C fast path.
The only room that touches the HTTP library's private parts (``pool`` and ``timing``, behind
the production transport).
"""
