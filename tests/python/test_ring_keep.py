"""Ring mode (`--read-buffers ring`): bytes the relay must keep in a connection's own buffer
(the rest of a ring chunk behind a command the relay stops at) are kept whole, even when they
nearly fill that buffer. `ReadBuffer::append` copies nothing when bytes do not fit; ring_io/mod.rs
then ends the session (debug builds, which these tests run, assert), never goes on without them.
"""

import pymysql
import pytest

from mysql_wire import packet

COPIED = "ringgate_read_buffer_ring_copied_bytes_total"


# Only ring mode keeps bytes out of ring chunks.
pytestmark = pytest.mark.read_buffers("ring")


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "whole-buffers"])
@pytest.mark.parametrize("pooling", ["session", "transaction"])
def test_a_stopped_command_near_the_buffer_size_is_kept_whole(make_proxy, monkeypatch, pooling, incremental):
    """One write: a COM_PING, then a 16,005-byte COM_BINLOG_DUMP (a command the relay stops at,
    answered by the proxy's ERR 1047), 16,010 bytes in all, under the 16 KiB read buffer. In
    session pooling the relay forwards the ping from the ring chunk and keeps the 16,005 bytes
    behind it (`ring_forwarded`); in transaction pooling the parked session stages the whole
    chunk before the lease (`ring_stage_client`). Both with incremental consumption and with
    whole buffers per receive (its probe forced to fail). The copy counter must grow by at least
    the bytes behind the ping, the ping must be answered, and the stop must get the proxy's ERR;
    a keep site that could not keep its bytes asserts in this debug build (each site was checked
    to fail this test when made to report its bytes as not kept)."""
    if not incremental:
        monkeypatch.setenv("RINGGATE_DEBUG_PROBE_FAIL", "pbuf_inc")
    proxy = make_proxy(pooling=pooling)
    c = proxy.connect()
    before = proxy.metrics()(COPIED)
    behind = packet(0, b"\x12" + b"\0" * 16000)
    assert len(behind) == 16005
    c._sock.sendall(packet(0, b"\x0e") + behind)
    c._next_seq_id = 1
    ok = c._read_packet()
    assert ok.is_ok_packet(), ok.dump() if hasattr(ok, "dump") else ok
    c._next_seq_id = 1
    with pytest.raises(pymysql.err.MySQLError) as e:
        c._read_packet()
    assert e.value.args[0] == 1047, e.value
    copied = proxy.metrics()(COPIED) - before
    assert copied >= len(behind), f"only {copied} bytes kept out of the ring"
    c.close()
