//! The part every header view shares (smoltcp's `Packet<T>` pattern): the wrapper type and its
//! `new_unchecked` / `new_checked` / `into_inner`, and the little-endian field accessors of the
//! control frames ([`crate::ctrl`]). A fixed-length header invokes [`fixed_view!`] with its length
//! and adds its own field accessors; a variable-length one invokes [`view!`] and writes its own
//! `check_len` (lengths, magic, version and counts).

/// Defines `pub struct $name<T: AsRef<[u8]>>` with its constructors; `new_checked` calls the
/// `check_len` that the invoking module defines.
macro_rules! view {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking it; accessors panic where it is too short (use
            /// `new_checked` on untrusted bytes).
            pub fn new_unchecked(buffer: T) -> $name<T> {
                $name { buffer }
            }

            /// Wraps a buffer after [`check_len`](Self::check_len).
            pub fn new_checked(buffer: T) -> crate::Result<$name<T>> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// Defines a [`view!`] over a header of `$len` bytes, with the length check.
macro_rules! fixed_view {
    ($(#[$doc:meta])* $name:ident, $len:path) => {
        crate::view::view! {
            $(#[$doc])*
            $name
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Ensures every accessor stays in bounds.
            pub fn check_len(&self) -> crate::Result<()> {
                let have = self.buffer.as_ref().len();
                if have < $len {
                    Err(crate::Error::Truncated { need: $len, have })
                } else {
                    Ok(())
                }
            }
        }
    };
}

pub(crate) use {fixed_view, view};

/// Defines a little-endian getter and setter over a field slice of exactly the type's size
/// (a `mod field` range); a wrong range length is a bug in this crate and panics.
macro_rules! le_accessors {
    ($($ty:ty: $get:ident, $set:ident;)*) => {$(
        pub(crate) fn $get(b: &[u8]) -> $ty {
            let mut a = [0; core::mem::size_of::<$ty>()];
            a.copy_from_slice(b);
            <$ty>::from_le_bytes(a)
        }

        pub(crate) fn $set(b: &mut [u8], v: $ty) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    )*};
}

le_accessors! {
    u16: le_u16, set_le_u16;
    u32: le_u32, set_le_u32;
    u64: le_u64, set_le_u64;
}
