"""One-sided RDMA-style transfers between numpy arrays: ``remora.fabric``.

Example (both ends in one process; normally they are two)::

    import threading, numpy as np
    from remora import fabric

    pd = fabric.ProtectionDomain()
    dst = np.zeros(1 << 20, np.uint8); mr_dst = pd.register(dst)
    lst = fabric.Listener("127.0.0.1:0", pd)
    srv = {}
    t = threading.Thread(target=lambda: srv.update(qp=lst.accept(mr_dst.info())[0]))
    t.start()
    cpd = fabric.ProtectionDomain()
    src = np.arange(1 << 20, dtype=np.uint8); mr_src = cpd.register(src)
    qp, peer = fabric.connect(lst.address, cpd, transport="udp")
    t.join()
    addr, length, rkey = fabric.decode_region(peer)
    qp.post_write(1, mr_src, 0, src.nbytes, addr, rkey, imm=7)
    assert qp.wait(5).ok and srv["qp"].wait(5).imm == 7
    assert (dst == src).all()
"""
from ._native import fabric as _m

ProtectionDomain = _m.ProtectionDomain
Region = _m.Region
QueuePair = _m.QueuePair
Listener = _m.Listener
Completion = _m.Completion
connect = _m.connect
decode_region = _m.decode_region

__all__ = [
    "ProtectionDomain",
    "Region",
    "QueuePair",
    "Listener",
    "Completion",
    "connect",
    "decode_region",
]
