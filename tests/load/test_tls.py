"""TLS certificates of the target are verified by default; verify_tls: false turns it off."""

import shutil
import subprocess
import time

import pytest
from geventhttpclient.url import URL
from locust.env import Environment

from tests.helpers.procs import scripted_server
from tests.helpers.runs import ROOT
from tokenswarm.load.setup import apply_user_settings
from tokenswarm.load.users import QAUser
from tokenswarm.record import RecordIdentity
from tokenswarm.wire.client import stream_call
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.transport import PoolTransport
from tokenswarm.workload.scenario import load_scenario

BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=0.0, schedule_lag_ms=0.0)


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    return str(d / "cert.pem"), str(d / "key.pem")


def call_through_user(url: str, verify_tls: bool):
    sc = load_scenario(ROOT / "scenarios" / "qa.yaml", {"target.verify_tls": verify_tls})
    apply_user_settings(sc, url)
    user = QAUser(Environment(user_classes=[QAUser], host=url))
    http = user.client.client.clientpool.get_client(URL(url))
    rec, _ = stream_call(PoolTransport(http, time.perf_counter), "/normal/v1/chat/completions?n=3", b"{}", {},
                         identity=RecordIdentity(**BASE),
                         anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=5, total_timeout_s=10)
    return rec


def test_a_self_signed_certificate_is_rejected_by_default_and_accepted_when_told(self_signed):
    with scripted_server(tls=self_signed) as url:
        rec = call_through_user(url, verify_tls=True)
        assert rec.outcome == "http_error" and rec.http_status is None
        assert "SSL" in rec.error or "certificate" in rec.error.lower()
        rec = call_through_user(url, verify_tls=False)
        assert rec.outcome == "ok" and rec.output_tokens == 3
