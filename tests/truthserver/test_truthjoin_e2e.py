"""benchmarks/truthjoin.py: the e2e error is the client's e2e minus the server's last write minus received."""

import math

from benchmarks.truthjoin import e2e_error, join

# the server received the request at 10.000 s and wrote chunks at 10.020, 10.030 and 10.040 s
TRUTH = {"r1": {"id": "r1", "received": 10.0, "chunks": [[10.020, 1], [10.030, 1], [10.040, 1]]}}


def test_the_e2e_error_counts_from_the_servers_last_chunk_write():
    assert math.isclose(e2e_error(41.2, TRUTH["r1"]), 1.2, abs_tol=1e-9)
    assert math.isclose(e2e_error(40.0, TRUTH["r1"]), 0.0, abs_tol=1e-9)


def test_join_reports_e2e_errors_only_for_requests_that_give_one():
    three = join([("r1", 20.0, [20.0, 30.0, 40.0])], TRUTH)
    assert three["ends"] == 0 and math.isnan(three["e2e_err_p99_ms"])
    four = join([("r1", 20.0, [20.0, 30.0, 40.0], 40.5)], TRUTH)
    assert four["ends"] == 1 and math.isclose(four["e2e_err_p99_ms"], 0.5, abs_tol=1e-9)
    assert four["joined"] == 1 and math.isclose(four["ttft_err_p99_ms"], 0.0, abs_tol=1e-9)
