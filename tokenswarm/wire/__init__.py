"""One request on the wire: send it, read the stream, date each delivery, build the record.

Client and the transport seam it sends through (``transport``), connection pool, the timed
send, the event-loop readers (stream poller, response head, body) and timing adapter, SSE and
de-chunking, chunk JSON, engine-specific fields, kernel stamps, the wall-clock anchor and the
optional C fast path.
The only room that touches the HTTP library's private parts (``pool``, ``send``, ``libread``
and ``timing``, behind the production transport).
"""
