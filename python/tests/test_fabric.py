"""remora.fabric: numpy arrays as regions, every transport, every byte checked."""
import mmap
import threading

import numpy as np
import pytest

from remora import fabric

N = 1 << 20


def pair(transport, qp="rc"):
    spd = fabric.ProtectionDomain()
    sbuf = np.zeros(N, np.uint8)
    smr = spd.register(sbuf)
    lst = fabric.Listener("127.0.0.1:0", spd)
    out = {}

    def serve():
        out["qp"], out["peer"] = lst.accept(smr.info())

    t = threading.Thread(target=serve)
    t.start()
    cpd = fabric.ProtectionDomain()
    cbuf = np.random.default_rng(1).integers(0, 255, N, dtype=np.uint8)
    cmr = cpd.register(cbuf)
    qp, peer = fabric.connect(lst.address, cpd, transport=transport, qp=qp, private=cmr.info())
    t.join(10)
    assert "qp" in out
    return (qp, cbuf, cmr, fabric.decode_region(peer)), (out["qp"], sbuf, smr)


@pytest.mark.parametrize("transport", ["udp", "shm", "tcp"])
def test_write_with_immediate_and_read_back(transport):
    (qp, cbuf, cmr, (addr, length, rkey)), (sqp, sbuf, smr) = pair(transport)
    assert length == N and qp.transport == transport
    qp.post_write(1, cmr, 0, N // 2, addr, rkey, imm=0xABC)
    c = qp.wait(10)
    assert c is not None and c.ok and c.opcode == "write" and c.wr_id == 1
    s = sqp.wait(10)
    assert s.opcode == "recv_rdma_with_imm" and s.imm == 0xABC and s.byte_len == N // 2
    assert np.array_equal(sbuf[: N // 2], cbuf[: N // 2])
    # READ the server's bytes back into the second half.
    qp.post_read(2, cmr, N // 2, N // 2, addr, rkey)
    c = qp.wait(10)
    assert c.ok and c.opcode == "read"
    assert np.array_equal(cbuf[N // 2 :], sbuf[: N // 2])


def test_float_arrays_and_wrong_key():
    (qp, cbuf, cmr, (addr, length, rkey)), (sqp, sbuf, smr) = pair("udp")
    cpd = fabric.ProtectionDomain()
    f = np.linspace(0, 1, 1000, dtype=np.float32)
    fmr = cpd.register(f)
    assert fmr.length == f.nbytes
    # f belongs to another protection domain than qp's: the send still works from its memory.
    qp.post_write(5, cmr, 0, 64, addr, rkey ^ 0x5500)
    c = qp.wait(10)
    assert c.status == "remote_access_error"
    assert sqp.stats()["access_errors"] == 1
    with pytest.raises(RuntimeError):
        qp.post_write(6, cmr, 0, 64, addr, rkey)


def test_register_rejects_bad_arrays():
    pd = fabric.ProtectionDomain()
    with pytest.raises(ValueError):
        pd.register(np.zeros((10, 10))[:, ::2])
    ro = np.zeros(10)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        pd.register(ro)
    with pytest.raises(TypeError):
        pd.register(b"bytes")
    with pytest.raises(ValueError):
        pd.register(np.zeros(10), access="x")


def test_send_into_posted_receive():
    (qp, cbuf, cmr, _), (sqp, sbuf, smr) = pair("tcp")
    sqp.post_recv(9, smr, 1000, 5000)
    qp.post_send(3, cmr, 0, 4000, imm=5)
    assert qp.wait(10).ok
    r = sqp.wait(10)
    assert (r.wr_id, r.opcode, r.byte_len, r.imm) == (9, "recv", 4000, 5)
    assert np.array_equal(sbuf[1000:5000], cbuf[:4000])


def test_shm_peers_are_named_by_the_kernel_and_numpy_arrays_travel_inline():
    import os

    (qp, cbuf, cmr, (addr, length, rkey)), (sqp, sbuf, smr) = pair("shm")
    assert sqp.peer_credentials() == (os.getpid(), os.geteuid(), os.getegid())
    assert qp.peer_credentials()[0] == os.getpid()
    # numpy memory is not a memfd: nothing is handed over, the bytes go in the stream.
    qp.post_write(1, cmr, 0, 4096, addr, rkey)
    assert qp.wait(10).ok
    assert np.array_equal(sbuf[:4096], cbuf[:4096])
    assert sqp.stats()["invalid_requests"] == 0
    (uqp, *_), _ = pair("udp")
    assert uqp.peer_credentials() is None


@pytest.mark.parametrize("page_in", ["pio", "pi4", "pia"])
def test_writes_into_memory_never_touched_fault_and_arrive_whole(page_in):
    """PART: the server's array is a fresh anonymous mapping (mmap, never touched; np.zeros
    may reuse heap memory that was), nothing is pinned or pre-touched; every byte arrives,
    and the counters show the faults and ERRs."""
    n = 8 << 20
    spd = fabric.ProtectionDomain()
    sbuf = np.frombuffer(mmap.mmap(-1, n), np.uint8)
    smr = spd.register(sbuf)
    assert not smr.is_resident()
    lst = fabric.Listener("127.0.0.1:0", spd, page_in=page_in)
    out = {}
    t = threading.Thread(target=lambda: out.update(qp=lst.accept(smr.info())[0]))
    t.start()
    cpd = fabric.ProtectionDomain()
    cbuf = np.random.default_rng(2).integers(0, 255, n, dtype=np.uint8)
    cmr = cpd.register(cbuf)
    qp, peer = fabric.connect(lst.address, cpd, fault_timeout=None)
    t.join(10)
    addr, _, rkey = fabric.decode_region(peer)
    for round_ in range(2):
        qp.post_write(round_, cmr, 0, n, addr, rkey)
        c = qp.wait(30)
        assert c is not None and c.ok, c
        assert np.array_equal(sbuf, cbuf)
        # Drop the server's pages between rounds: the next WRITE faults again.
        smr.evict()
        assert not smr.is_resident(0, 4096)
        cbuf[:] = np.random.default_rng(3 + round_).integers(0, 255, n, dtype=np.uint8)
    s = out["qp"].stats()
    assert s["faults"] >= 2 and s["pages_in"] >= n // 4096
    # Each fault's packets waited behind the page-in wave, or the sender resent after the ERR.
    assert s["errs_sent"] + s["wave_holds"] >= 2
    assert qp.stats()["errs_received"] >= 2 or s["wave_holds"] > 0


def test_fault_settings_are_checked():
    pd = fabric.ProtectionDomain()
    with pytest.raises(ValueError, match="page-in policy"):
        fabric.Listener("127.0.0.1:0", pd, page_in="all")
    with pytest.raises(ValueError, match="fault mode"):
        fabric.Listener("127.0.0.1:0", pd, faults="maybe")
    with pytest.raises(ValueError, match="fault_timeout"):
        fabric.connect("127.0.0.1:1", pd, fault_timeout=-1.0)


@pytest.mark.parametrize(
    "transport,lazy_ack", [("udp", False), ("shm", False), ("tcp", False), ("tcp", True)]
)
def test_progress_in_the_callers_thread(transport, lazy_ack):
    """progress="poll" on both sides: the client's wait/spin drives it, a pump thread drives
    the server, and the listener holds a RoCEv2 receive address from the start. tcp also with
    lazy ACKs (a lone ACK rides on the next request or leaves on the next call)."""
    spd = fabric.ProtectionDomain()
    sbuf = np.zeros(N, np.uint8)
    smr = spd.register(sbuf)
    lst = fabric.Listener("127.0.0.1:0", spd, progress="poll", lazy_ack=lazy_ack)
    assert lst.udp_address is not None and lst.udp_address.startswith("127.0.0.1:")
    out = {}
    stop = threading.Event()

    def serve():
        out["qp"], out["peer"] = lst.accept(smr.info())
        while not stop.is_set():
            out["qp"].progress(0.005)

    t = threading.Thread(target=serve)
    t.start()
    cpd = fabric.ProtectionDomain()
    cbuf = np.random.default_rng(2).integers(0, 255, N, dtype=np.uint8)
    cmr = cpd.register(cbuf)
    qp, peer = fabric.connect(
        lst.address,
        cpd,
        transport=transport,
        progress="poll",
        lazy_ack=lazy_ack,
        private=cmr.info(),
    )
    addr, _, rkey = fabric.decode_region(peer)
    assert qp.udp_peer == (lst.udp_address if transport == "udp" else None)
    try:
        for i in range(20):
            qp.post_write(i, cmr, i * 1000, 1000, addr + i * 1000, rkey, imm=i)
            c = qp.spin(10) if i % 2 else qp.wait(10)
            assert c is not None and c.ok and c.wr_id == i
        for i in range(20):
            s = out["qp"].wait(10)
            assert s.opcode == "recv_rdma_with_imm" and s.imm == i
        assert np.array_equal(sbuf[:20000], cbuf[:20000])
        qp.post_read(99, cmr, N // 2, 20000, addr, rkey)
        c = qp.wait(10)
        assert c.ok and c.opcode == "read"
        assert np.array_equal(cbuf[N // 2 : N // 2 + 20000], sbuf[:20000])
    finally:
        stop.set()
        t.join(10)
    with pytest.raises(ValueError, match="progress"):
        fabric.connect(lst.address, cpd, progress="sometimes")


@pytest.mark.parametrize("progress", ["thread", "poll"])
def test_allocated_regions_go_one_sided_over_shm(progress):
    """pd.allocate gives memfd-backed regions: over shm the client WRITEs and READs them itself
    (one_sided counts it), and region.array() sees the bytes without a copy."""
    spd = fabric.ProtectionDomain()
    smr = spd.allocate(N)
    sarr = smr.array()
    assert sarr.shape == (N,) and sarr.dtype == np.uint8
    lst = fabric.Listener("127.0.0.1:0", spd, progress=progress)
    out = {}
    t = threading.Thread(target=lambda: out.update(zip(("qp", "peer"), lst.accept(smr.info()))))
    t.start()
    cpd = fabric.ProtectionDomain()
    cmr = cpd.allocate(N)
    carr = cmr.array()
    carr[:] = np.random.default_rng(3).integers(0, 255, N, dtype=np.uint8)
    qp, peer = fabric.connect(lst.address, cpd, transport="shm", progress=progress)
    t.join(10)
    addr, _, rkey = fabric.decode_region(peer)
    for i in range(50):
        qp.post_write(i, cmr, i * 1000, 1000, addr + i * 1000, rkey, imm=i)
        c = qp.spin(10) if progress == "poll" else qp.wait(10)
        assert c.ok and c.wr_id == i
    for i in range(50):
        assert out["qp"].wait(10).imm == i
    assert np.array_equal(sarr[:50000], carr[:50000])
    sarr[N // 2 : N // 2 + 4096] = 7
    qp.post_read(99, cmr, 0, 4096, addr + N // 2, rkey)
    assert qp.wait(10).ok
    assert (carr[:4096] == 7).all()
    assert qp.stats()["one_sided"] > 40, qp.stats()
    assert out["qp"].stats()["ring_completions"] > 40
    with pytest.raises(ValueError):
        cpd.allocate(0)
