//! Engines by name, in a fallback order: the registry `remora-match` and `remora-resize` pick
//! their engines from (pyFAI's method registry in small).
//!
//! A [`Registry`] is a slice of [`Entry`]s in `auto`'s fallback order (the fastest first), each
//! a name and a constructor that gives the engine or the reason this machine cannot run it,
//! never a crash. [`Registry::open`] opens one engine by name ([`Purpose::Named`]: any device
//! admitted); [`Registry::auto`] takes the first along the list that opens for
//! [`Purpose::Auto`], where an engine slower than the ones after it (a GPU engine on a CPU-type
//! device such as lavapipe) declines; [`Registry::list`] gives every engine with its reason.
//!
//! It is generic over the engine handle `T` (an `Arc<dyn Trait>`, say), the error `E` and an
//! extra per-entry value `M` (`()` when none), so that each crate keeps its own types and error
//! messages: the error for a name the registry lacks is built by the crate's `unknown` function.
//! It knows nothing of GPUs, and compiles without the `gpu` feature.
//!
//! ```
//! use std::sync::Arc;
//! use remora_accel::registry::{Entry, Named, Purpose, Registry};
//!
//! #[derive(Debug)]
//! struct Fast;
//!
//! impl Named for Fast {
//!     fn name(&self) -> &str {
//!         "fast"
//!     }
//! }
//!
//! fn unknown(name: &str, known: &[&'static str]) -> String {
//!     format!("unknown engine {name:?} (known: {})", known.join(", "))
//! }
//!
//! const ENGINES: Registry<'static, Arc<Fast>, String> = Registry::new(
//!     &[
//!         Entry { name: "gpu", meta: (), open: |_| Err("no device here".into()) },
//!         Entry { name: "fast", meta: (), open: |_| Ok(Arc::new(Fast)) },
//!     ],
//!     unknown,
//! );
//!
//! assert_eq!(ENGINES.names(), ["gpu", "fast"]);
//! let (entry, engine) = ENGINES.auto().unwrap(); // the GPU's reason passed over
//! assert_eq!((entry.name, engine.name()), ("fast", "fast"));
//! assert_eq!(ENGINES.open("gpu", Purpose::Named).unwrap_err(), "no device here");
//! assert_eq!(
//!     ENGINES.open("cuda", Purpose::Named).unwrap_err(),
//!     r#"unknown engine "cuda" (known: gpu, fast)"#
//! );
//! ```

use std::fmt;
use std::sync::Arc;

/// Why an engine is being opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Asked for by name: the engine opens whenever this machine can run it (a GPU engine on any
    /// device its policy admits, a CPU-type one included).
    Named,
    /// Tried by `auto` along the fallback list: an engine slower than the ones after it (a GPU
    /// engine on a CPU-type device such as lavapipe) declines, with the reason.
    Auto,
}

/// An engine's constructor in a registry: the engine, or why this machine cannot run it.
pub type Open<T, E> = fn(Purpose) -> Result<T, E>;

/// The builder of the error for a name a registry lacks, from the name and the known names in
/// fallback order (`auto` on an empty registry asks it for `"auto"` with no known names).
pub type Unknown<E> = fn(&str, &[&'static str]) -> E;

/// One engine of [`Registry::list`]: its entry, and the engine or why this machine cannot run
/// it.
pub type Listed<'a, T, E, M = ()> = (&'a Entry<T, E, M>, Result<T, E>);

/// What a registry asks of an opened engine: the name it answers to, which must be the one it is
/// registered under (checked in debug builds).
pub trait Named {
    /// The engine's own name.
    fn name(&self) -> &str;
}

impl<N: Named + ?Sized> Named for Arc<N> {
    fn name(&self) -> &str {
        (**self).name()
    }
}

/// One engine a registry knows.
pub struct Entry<T, E, M = ()> {
    /// Its name (the engine's own).
    pub name: &'static str,
    /// What else the crate keeps with it (`remora-match`: the kernel that stands for it).
    pub meta: M,
    /// Its constructor.
    pub open: Open<T, E>,
}

// By hand: the derives would ask `T` and `E` for what only `M` needs.
impl<T, E, M: Clone> Clone for Entry<T, E, M> {
    fn clone(&self) -> Self {
        Entry {
            name: self.name,
            meta: self.meta.clone(),
            open: self.open,
        }
    }
}

impl<T, E, M: Copy> Copy for Entry<T, E, M> {}

impl<T, E, M: fmt::Debug> fmt::Debug for Entry<T, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.name)
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

/// Engines in fallback order, with the crate's error for a name it lacks (tests build their own,
/// with engines that cannot open).
pub struct Registry<'a, T, E, M = ()> {
    entries: &'a [Entry<T, E, M>],
    unknown: Unknown<E>,
}

impl<T, E, M> Clone for Registry<'_, T, E, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, E, M> Copy for Registry<'_, T, E, M> {}

impl<T, E, M: fmt::Debug> fmt::Debug for Registry<'_, T, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Registry").field(&self.entries).finish()
    }
}

impl<'a, T, E, M> Registry<'a, T, E, M> {
    /// The registry of `entries`, in `auto`'s fallback order; `unknown` builds the error for a
    /// name it lacks.
    pub const fn new(entries: &'a [Entry<T, E, M>], unknown: Unknown<E>) -> Self {
        Registry { entries, unknown }
    }

    /// The entries, in fallback order.
    pub fn entries(&self) -> &'a [Entry<T, E, M>] {
        self.entries
    }

    /// The names, in fallback order.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.name).collect()
    }

    /// The entry called `name`, or the crate's error listing the known names.
    pub fn find(&self, name: &str) -> Result<&'a Entry<T, E, M>, E> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| (self.unknown)(name, &self.names()))
    }

    /// Every engine with, for each, the engine or why this machine cannot run it.
    pub fn list(&self) -> Vec<Listed<'a, T, E, M>> {
        self.entries
            .iter()
            .map(|e| (e, (e.open)(Purpose::Named)))
            .collect()
    }

    /// The first engine along the list that opens for `auto`, with its entry; when none does,
    /// the last one's reason (on an empty registry, the unknown-name error for `"auto"`).
    pub fn auto(&self) -> Result<(&'a Entry<T, E, M>, T), E> {
        let mut why = None;
        for e in self.entries {
            match (e.open)(Purpose::Auto) {
                Ok(engine) => return Ok((e, engine)),
                Err(reason) => why = Some(reason),
            }
        }
        Err(why.unwrap_or_else(|| (self.unknown)("auto", &self.names())))
    }
}

impl<T: Named, E, M> Registry<'_, T, E, M> {
    /// Opens the engine called `name`, or says why not.
    pub fn open(&self, name: &str, purpose: Purpose) -> Result<T, E> {
        let engine = (self.find(name)?.open)(purpose)?;
        debug_assert_eq!(
            engine.name(),
            name,
            "an engine registered under another name"
        );
        Ok(engine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy engine: its name, and what it computes.
    #[derive(Debug)]
    struct Toy(&'static str);

    impl Named for Toy {
        fn name(&self) -> &str {
            self.0
        }
    }

    impl Toy {
        fn double(&self, x: u32) -> u32 {
            2 * x
        }
    }

    type Reg<'a> = Registry<'a, Arc<Toy>, String, u8>;

    fn unknown(name: &str, known: &[&'static str]) -> String {
        format!("unknown engine {name:?} (known: {})", known.join(", "))
    }

    /// An engine that never opens.
    const DOWN: Entry<Arc<Toy>, String, u8> = Entry {
        name: "down",
        meta: 1,
        open: |_| Err("no device here".into()),
    };

    /// An engine that opens when named but declines `auto` (as a GPU engine on lavapipe).
    const SLOW: Entry<Arc<Toy>, String, u8> = Entry {
        name: "slow",
        meta: 2,
        open: |purpose| match purpose {
            Purpose::Named => Ok(Arc::new(Toy("slow"))),
            Purpose::Auto => Err("slower than the next engine".into()),
        },
    };

    /// An engine that always opens.
    const PORTABLE: Entry<Arc<Toy>, String, u8> = Entry {
        name: "portable",
        meta: 3,
        open: |_| Ok(Arc::new(Toy("portable"))),
    };

    const FAKE: [Entry<Arc<Toy>, String, u8>; 3] = [DOWN, SLOW, PORTABLE];

    #[test]
    fn the_registry_lists_every_engine_with_its_availability_or_the_reason() {
        let reg = Reg::new(&FAKE, unknown);
        assert_eq!(reg.names(), ["down", "slow", "portable"]);
        assert_eq!(reg.entries().len(), 3);
        let list = reg.list();
        let names: Vec<_> = list.iter().map(|(e, _)| e.name).collect();
        assert_eq!(names, reg.names());
        assert_eq!(list[0].1.as_ref().unwrap_err(), "no device here");
        // Listed, the engine that declines `auto` opens (as for a name).
        assert_eq!(list[1].1.as_ref().unwrap().name(), "slow");
        assert_eq!(list[2].1.as_ref().unwrap().name(), "portable");
        assert_eq!(list[2].0.meta, 3);
    }

    #[test]
    fn auto_falls_back_along_the_list() {
        let reg = Reg::new(&FAKE, unknown);
        let (entry, engine) = reg.auto().unwrap();
        assert_eq!((entry.name, entry.meta), ("portable", 3));
        assert_eq!(engine.name(), "portable");
        // Named, the engine that declines `auto` opens, and computes as the others do.
        let slow = reg.open("slow", Purpose::Named).unwrap();
        assert_eq!(slow.double(21), engine.double(21));
        assert_eq!(
            reg.open("slow", Purpose::Auto).unwrap_err(),
            "slower than the next engine"
        );
        assert_eq!(
            reg.open("down", Purpose::Named).unwrap_err(),
            "no device here"
        );
        // Nothing opens: the last engine's reason.
        let e = Reg::new(&FAKE[..2], unknown).auto().unwrap_err();
        assert_eq!(e, "slower than the next engine");
        // Nothing registered: the unknown-name error for `auto`.
        let e = Reg::new(&[], unknown).auto().unwrap_err();
        assert_eq!(e, "unknown engine \"auto\" (known: )");
    }

    #[test]
    fn unknown_names_are_the_crates_error_listing_the_known_ones() {
        let reg = Reg::new(&FAKE, unknown);
        let e = reg.open("cuda", Purpose::Named).unwrap_err();
        assert_eq!(e, "unknown engine \"cuda\" (known: down, slow, portable)");
        assert_eq!(reg.find("cuda").unwrap_err(), e);
        assert_eq!(reg.find("slow").unwrap().meta, 2);
        // Each registry its own message.
        let other = Reg::new(&FAKE, |name, _| format!("no {name}"));
        assert_eq!(other.find("cuda").unwrap_err(), "no cuda");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "an engine registered under another name")]
    fn an_engine_under_another_name_is_a_bug_caught_in_debug_builds() {
        const LIAR: Entry<Arc<Toy>, String, u8> = Entry {
            name: "liar",
            meta: 0,
            open: |_| Ok(Arc::new(Toy("portable"))),
        };
        let _ = Reg::new(&[LIAR], unknown).open("liar", Purpose::Named);
    }

    #[test]
    fn entries_copy_and_print_without_asking_the_engine_type() {
        let copy = FAKE[1];
        assert_eq!(copy.name, "slow");
        let shown = format!("{:?}", Reg::new(&FAKE[..1], unknown));
        assert_eq!(shown, "Registry([Entry { name: \"down\", meta: 1, .. }])");
    }
}
