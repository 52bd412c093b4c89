//! 2 MB huge pages: mapped from the reserved pool, tracked in 2 MB pages, paged in and evicted.
//! Skips with the reason when no huge pages are reserved (`/proc/sys/vm/nr_hugepages` is 0 on
//! most machines; the test does not change it).

use remora_mem::{Access, Backing, Buffer, Error, Mode, PageIn, Pd, HUGE_PAGE_SIZE};

fn huge_or_skip(len: usize) -> Option<Buffer> {
    match Buffer::huge_pages(len) {
        Ok(b) => Some(b),
        Err(e @ Error::HugePagesUnavailable { .. }) => {
            let pool = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap_or_default();
            eprintln!(
                "skipping huge-page test: {e} (nr_hugepages = {})",
                pool.trim()
            );
            // The error is the clear one the brief asks for.
            assert!(e.to_string().contains("nr_hugepages"));
            None
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Resident 4 KB pages in `[ptr, ptr+len)` per mincore.
fn kernel_resident_bytes(ptr: *mut u8, len: usize) -> usize {
    let mut vec = vec![0u8; len / 4096];
    // SAFETY: the range is a live mapping, page-aligned; one byte per 4 KB page.
    assert_eq!(
        unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) },
        0
    );
    vec.iter().filter(|&&b| b & 1 == 1).count() * 4096
}

#[test]
fn huge_pages_page_in_and_evict() {
    let Some(buf) = huge_or_skip(3 << 20) else {
        return;
    };
    assert_eq!(buf.len(), 2 * HUGE_PAGE_SIZE);
    assert_eq!(buf.backing(), Backing::HugePages);
    assert_eq!(buf.as_ptr() as usize % HUGE_PAGE_SIZE, 0);
    let pd = Pd::new();
    let r = pd.register(buf, Access::ALL, Mode::OnDemand).unwrap();
    assert_eq!(r.residency().page_size(), HUGE_PAGE_SIZE);
    assert_eq!(r.residency().pages(), 2);
    assert_eq!(r.refresh_residency().unwrap(), 0);
    assert_eq!(r.page_in(HUGE_PAGE_SIZE + 5, PageIn::OnePage).unwrap(), 1);
    assert!(r.residency().is_resident(1) && !r.residency().is_resident(0));
    assert_eq!(
        kernel_resident_bytes(r.as_ptr(), r.len()),
        HUGE_PAGE_SIZE,
        "one whole huge page is in"
    );
    r.write_at(HUGE_PAGE_SIZE + 100, b"huge").unwrap();
    r.evict(HUGE_PAGE_SIZE + 100, 4).unwrap();
    assert_eq!(kernel_resident_bytes(r.as_ptr(), r.len()), 0);
    assert_eq!(r.refresh_residency().unwrap(), 0);
    let mut out = [1u8; 4];
    r.read_at(HUGE_PAGE_SIZE + 100, &mut out).unwrap();
    assert_eq!(out, [0; 4]);
    assert_eq!(
        r.refresh_residency().unwrap(),
        1,
        "the read faulted the page back"
    );
}

#[test]
fn huge_pages_pinned() {
    let Some(buf) = huge_or_skip(HUGE_PAGE_SIZE) else {
        return;
    };
    let pd = Pd::new();
    match pd.register(buf, Access::ALL, Mode::Pinned) {
        Ok(r) => {
            assert!(r.is_resident(0, r.len()));
            assert_eq!(kernel_resident_bytes(r.as_ptr(), r.len()), HUGE_PAGE_SIZE);
        }
        Err(e) => assert!(matches!(e, Error::PinFailed { .. }), "{e}"),
    }
}
