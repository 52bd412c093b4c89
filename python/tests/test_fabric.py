"""remora.fabric: numpy arrays as regions, every transport, every byte checked."""
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
    with pytest.raises(ValueError):
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
