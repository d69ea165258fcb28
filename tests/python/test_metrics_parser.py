"""Self-test of the harness's Prometheus text parser (needs no proxy)."""

import math

from conftest import Metrics, parse_metrics


def test_parse_metrics():
    text = (
        "# HELP ringgate_read_buffers_total Read buffers.\n"
        "# TYPE ringgate_read_buffers_total gauge\n"
        'ringgate_read_buffers_total{mode="fixed"} 2048\n'
        'ringgate_backend_connections{state="idle",pool="a"} 3 1700000000000\n'
        "ringgate_commands_total 1.5e3\n"
        'ringgate_connect_duration_seconds_bucket{le="+Inf"} 7\n'
        'ringgate_weird{a="x,}y"} NaN\n'
    )
    m = Metrics(parse_metrics(text))
    assert m('ringgate_read_buffers_total{mode="fixed"}') == 2048
    assert m('ringgate_backend_connections{state="idle", pool="a"}') == 3
    assert m('ringgate_backend_connections{pool="a",state="idle"}') == 3
    assert m("ringgate_commands_total") == 1500
    assert m('ringgate_connect_duration_seconds_bucket{le="+Inf"}') == 7
    assert math.isnan(m('ringgate_weird{a="x,}y"}'))
    assert "ringgate_missing" not in m
