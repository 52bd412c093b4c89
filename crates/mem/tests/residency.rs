//! Residency: evict makes pages missing (and the kernel agrees), each page-in policy makes the
//! right pages resident, and the map follows mincore.

use std::ops::Range;
use std::sync::Arc;

use remora_mem::{Access, Backing, Buffer, Error, Mode, PageIn, Pd, Region, PAGE_SIZE};

const PAGES: usize = 64;

/// What the kernel says, page by page, for the region's pages (aligned buffers only).
fn kernel_resident(r: &Region) -> Vec<bool> {
    let pages = r.len().div_ceil(PAGE_SIZE);
    let mut vec = vec![0u8; pages];
    // SAFETY: the region's pages are mapped and `vec` has one byte per page.
    let rc = unsafe { libc::mincore(r.as_ptr().cast(), r.len(), vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().map(|b| b & 1 == 1).collect()
}

fn map_resident(r: &Region) -> Vec<bool> {
    (0..r.residency().pages())
        .map(|p| r.residency().is_resident(p))
        .collect()
}

fn only(range: Range<usize>) -> Vec<bool> {
    (0..PAGES).map(|p| range.contains(&p)).collect()
}

/// The map holds exactly `want`, and the kernel has at least those pages.
#[track_caller]
fn assert_pages(r: &Region, want: &[bool]) {
    assert_eq!(map_resident(r), want, "map");
    let k = kernel_resident(r);
    for (p, (&w, &k)) in want.iter().zip(&k).enumerate() {
        assert!(
            !w || k,
            "page {p} marked resident but the kernel has it missing"
        );
    }
}

fn region(pd: &Pd, backing: Backing) -> Arc<Region> {
    let buf = match backing {
        Backing::Anonymous => Buffer::anonymous(PAGES * PAGE_SIZE),
        Backing::Memfd => Buffer::memfd("residency", PAGES * PAGE_SIZE),
        _ => unreachable!(),
    }
    .unwrap();
    pd.register(buf, Access::ALL, Mode::OnDemand).unwrap()
}

fn policies_on(backing: Backing) {
    let pd = Pd::new();
    let r = region(&pd, backing);
    assert_eq!(r.residency().pages(), PAGES);
    // Fresh memory: nothing resident, per the map and the kernel.
    assert_eq!(r.refresh_residency().unwrap(), 0);
    assert_eq!(kernel_resident(&r), vec![false; PAGES]);

    // PIO: only the faulting page.
    assert_eq!(r.page_in(5 * PAGE_SIZE + 17, PageIn::OnePage).unwrap(), 1);
    assert_pages(&r, &only(5..6));
    assert!(r.is_resident(5 * PAGE_SIZE, PAGE_SIZE));
    assert_eq!(r.page_of(5 * PAGE_SIZE + 17), Some(5));
    assert_eq!(r.page_of(r.len()), None);
    assert_eq!(r.first_missing_page(4 * PAGE_SIZE, 3 * PAGE_SIZE), Some(4));
    assert_eq!(r.first_missing_page(5 * PAGE_SIZE, 2 * PAGE_SIZE), Some(6));
    assert_eq!(r.first_missing_page(5 * PAGE_SIZE, PAGE_SIZE), None);
    assert!(!r.is_resident(5 * PAGE_SIZE, PAGE_SIZE + 1));
    // Again: nothing new.
    assert_eq!(r.page_in(5 * PAGE_SIZE, PageIn::OnePage).unwrap(), 0);

    // PI4: the aligned 16 KB block.
    r.evict(0, r.len()).unwrap();
    assert_pages(&r, &only(0..0));
    assert_eq!(kernel_resident(&r), vec![false; PAGES]);
    assert_eq!(r.page_in(9 * PAGE_SIZE + 1, PageIn::Block(4)).unwrap(), 4);
    assert_pages(&r, &only(8..12));

    // PIA: from the faulting page to the end.
    r.evict(0, r.len()).unwrap();
    assert_eq!(r.page_in(40 * PAGE_SIZE, PageIn::All).unwrap(), PAGES - 40);
    assert_pages(&r, &only(40..PAGES));
    assert_eq!(r.residency().resident_count(), PAGES - 40);

    // A bounded range (the rest of one transfer), skipping what is already there.
    assert_eq!(
        r.page_in_range(38 * PAGE_SIZE + 1, 3 * PAGE_SIZE).unwrap(),
        2
    );
    assert_pages(&r, &only(38..PAGES));

    // Partial evict: pages touched by the range.
    r.evict(50 * PAGE_SIZE + 1, PAGE_SIZE).unwrap();
    let mut want = only(38..PAGES);
    want[50] = false;
    want[51] = false;
    assert_pages(&r, &want);
    let k = kernel_resident(&r);
    assert!(!k[50] && !k[51], "kernel still has evicted pages");

    // Out of range.
    assert!(matches!(
        r.page_in(r.len(), PageIn::OnePage),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(r.evict(1, r.len()).is_err());
    assert!(r.page_in_range(usize::MAX, 2).is_err());
}

#[test]
fn policies_anonymous() {
    policies_on(Backing::Anonymous);
}

#[test]
fn policies_memfd() {
    policies_on(Backing::Memfd);
}

#[test]
fn evict_discards_contents() {
    let pd = Pd::new();
    for backing in [Backing::Anonymous, Backing::Memfd] {
        let r = region(&pd, backing);
        r.write_at(3 * PAGE_SIZE, b"hello").unwrap();
        r.evict(3 * PAGE_SIZE, 5).unwrap();
        let mut out = [1u8; 5];
        r.read_at(3 * PAGE_SIZE, &mut out).unwrap();
        assert_eq!(out, [0; 5], "{backing:?}");
    }
}

#[test]
fn memfd_evict_is_seen_by_the_other_mapping() {
    let pd = Pd::new();
    let a = region(&pd, Backing::Memfd);
    let fd = a.memfd().unwrap().try_clone_to_owned().unwrap();
    let b = pd
        .register(
            Buffer::map_memfd(fd, PAGES * PAGE_SIZE).unwrap(),
            Access::ALL,
            Mode::OnDemand,
        )
        .unwrap();
    a.write_at(0, b"shared").unwrap();
    // The page is in the file, so the second mapping sees it resident too.
    assert_eq!(b.refresh_residency().unwrap(), 1);
    a.evict(0, PAGE_SIZE).unwrap();
    assert_eq!(b.refresh_residency().unwrap(), 0);
    let mut out = [9u8; 6];
    b.read_at(0, &mut out).unwrap();
    assert_eq!(out, [0; 6]);
}

#[test]
fn refresh_follows_the_kernel() {
    let pd = Pd::new();
    let r = region(&pd, Backing::Anonymous);
    // Pages written behind the map's back are found by refresh.
    r.write_at(7 * PAGE_SIZE, b"x").unwrap();
    r.write_at(20 * PAGE_SIZE, b"y").unwrap();
    assert_eq!(r.residency().resident_count(), 0);
    assert_eq!(r.refresh_residency().unwrap(), 2);
    let mut want = only(7..8);
    want[20] = true;
    assert_eq!(map_resident(&r), want);
    // A registration of memory already in use starts with the kernel's view.
    let used = Buffer::anonymous(8 * PAGE_SIZE).unwrap();
    // SAFETY: the buffer owns these bytes and nothing else refers to them yet.
    unsafe { used.as_ptr().add(PAGE_SIZE).write(1) };
    let r2 = pd.register(used, Access::ALL, Mode::OnDemand).unwrap();
    assert_eq!(r2.residency().resident_count(), 1);
    assert!(r2.residency().is_resident(1));
}

#[test]
fn read_only_regions_page_in_for_reading() {
    let pd = Pd::new();
    let r = pd
        .register(
            Buffer::anonymous(4 * PAGE_SIZE).unwrap(),
            Access::REMOTE_READ,
            Mode::OnDemand,
        )
        .unwrap();
    assert_eq!(r.page_in(0, PageIn::All).unwrap(), 4);
    assert!(r.is_resident(0, r.len()));
}

#[test]
fn external_unaligned_evict_spares_neighbours() {
    // Three pages; the region covers the middle of it, starting and ending mid-page.
    let host = Buffer::anonymous(3 * PAGE_SIZE).unwrap();
    // SAFETY: `host` outlives the region (dropped after it) and is writable.
    unsafe { std::ptr::write_bytes(host.as_ptr(), 0xAB, host.len()) };
    let pd = Pd::new();
    // SAFETY: as above.
    let buf = unsafe { Buffer::external(host.as_ptr().add(100), 2 * PAGE_SIZE) }.unwrap();
    let r = pd.register(buf, Access::ALL, Mode::OnDemand).unwrap();
    // Its pages are the three host pages, all resident after the fill.
    assert_eq!(r.residency().pages(), 3);
    assert_eq!(r.residency().resident_count(), 3);
    r.evict(0, r.len()).unwrap();
    // Only the middle page lies wholly inside the region.
    assert!(r.residency().is_resident(0));
    assert!(!r.residency().is_resident(1));
    assert!(r.residency().is_resident(2));
    // SAFETY: region and host are quiet; the bytes are mapped.
    let bytes = unsafe { std::slice::from_raw_parts(host.as_ptr(), host.len()) };
    assert!(bytes[..PAGE_SIZE].iter().all(|&b| b == 0xAB));
    assert!(bytes[PAGE_SIZE..2 * PAGE_SIZE].iter().all(|&b| b == 0));
    assert!(bytes[2 * PAGE_SIZE..].iter().all(|&b| b == 0xAB));
    // Paging in by region offset finds the right host page.
    assert_eq!(r.page_in(PAGE_SIZE, PageIn::OnePage).unwrap(), 1);
    assert!(r.is_resident(0, r.len()));
    pd.deregister(r.rkey()).unwrap();
    drop(r);
    drop(host);
}

#[test]
fn page_in_runs_concurrently() {
    let pd = Pd::new();
    let r = region(&pd, Backing::Anonymous);
    let total: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let r = &r;
                s.spawn(move || {
                    (0..PAGES)
                        .map(|p| {
                            r.page_in(((p + t * 16) % PAGES) * PAGE_SIZE, PageIn::Block(2))
                                .unwrap()
                        })
                        .sum::<usize>()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(r.residency().resident_count(), PAGES);
    // Each page is counted once however the workers interleave.
    assert_eq!(total, PAGES);
}
