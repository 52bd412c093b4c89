"""Every object that owns a socket, a mapping or a server is a context manager: the end of a
``with`` block calls ``close()``, also when the block raises (and the exception propagates)."""
import threading

import numpy as np
import pytest

import mock_daq_server
from remora import daq, fabric, lazy
from remora import resize as rr


def test_page_server_and_lazy_region_close_at_the_end_of_with():
    src = np.arange(1 << 16, dtype=np.uint32).view(np.uint8)
    with lazy.PageServer.memory(src.tobytes()) as srv:
        assert isinstance(srv, lazy.PageServer)
        with lazy.LazyRegion.connect(srv.address, deadline=0.3) as r:
            assert isinstance(r, lazy.LazyRegion)
            assert r.read(0, 16) == src[:16].tobytes()
        # The region is closed: a page not fetched yet is not fetched any more.
        with pytest.raises(OSError, match="closed"):
            r.read(len(src) // 2, 16)
        address = srv.address
    # The server is closed: nothing listens at its address any more.
    with pytest.raises(OSError):
        lazy.LazyRegion.connect(address, deadline=0.3)


def test_with_closes_and_propagates_an_exception():
    with pytest.raises(KeyError):
        with lazy.PageServer.memory(b"x" * 8192) as srv:
            address = srv.address
            raise KeyError("inside")
    with pytest.raises(OSError):
        lazy.LazyRegion.connect(address, deadline=0.3)


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_listener_and_queue_pairs_close_at_the_end_of_with(transport):
    spd = fabric.ProtectionDomain()
    sbuf = np.zeros(4096, np.uint8)
    smr = spd.register(sbuf)
    cpd = fabric.ProtectionDomain()
    cbuf = np.full(4096, 7, np.uint8)
    cmr = cpd.register(cbuf)
    out = {}
    with fabric.Listener("127.0.0.1:0", spd) as lst:
        assert isinstance(lst, fabric.Listener)
        t = threading.Thread(target=lambda: out.update(qp=lst.accept(smr.info())[0]))
        t.start()
        qp, peer = fabric.connect(lst.address, cpd, transport=transport)
        t.join(10)
        with qp, out["qp"] as sqp:
            addr, _, rkey = fabric.decode_region(peer)
            qp.post_write(1, cmr, 0, 4096, addr, rkey, imm=3)
            assert qp.wait(10).ok and sqp.wait(10).imm == 3
            assert (sbuf == 7).all()
        address = lst.address
    for closed in (qp, sqp):
        with pytest.raises(ValueError, match="queue pair is closed"):
            closed.post_write(2, cmr, 0, 16, addr, rkey)
        with pytest.raises(ValueError, match="queue pair is closed"):
            closed.wait(0.1)
        closed.close()  # idempotent
    with pytest.raises(ValueError, match="listener is closed"):
        lst.accept()
    with pytest.raises(ValueError, match="listener is closed"):
        lst.address
    lst.close()
    # Nothing listens at the old address.
    with pytest.raises(OSError, match="refused"):
        fabric.connect(address, cpd, transport=transport)


def test_daq_client_is_a_context_manager():
    server = mock_daq_server.serve(frames=10, rate_hz=1000.0, modules=1)
    host, port = server.server_address[:2]
    try:
        with daq.Client(f"http://{host}:{port}") as c:
            assert isinstance(c, daq.Client)
            assert "state" in c.status()
        assert c.closed
        with pytest.raises(ValueError, match="client is closed"):
            c.status()
        with pytest.raises(ValueError, match="client is closed"):
            next(c.events())
        c.close()  # idempotent
    finally:
        server.shutdown()


def test_resize_client_is_a_context_manager():
    with rr.Client("http://127.0.0.1:9") as c:
        assert isinstance(c, rr.Client)
    with pytest.raises(ValueError, match="client is closed"):
        c.resize(b"\xff\xd8", "10x10")
    with pytest.raises(ValueError, match="client is closed"):
        c.resize_many([b"\xff\xd8"], "10x10")
