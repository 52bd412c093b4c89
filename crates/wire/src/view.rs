//! The part every fixed-length header view shares (smoltcp's `Packet<T>` pattern): the wrapper
//! type and its `new_unchecked` / `new_checked` / `check_len` / `into_inner`. Each header module
//! invokes [`fixed_view!`] with its length and adds its own field accessors.

/// Defines `pub struct Packet<T: AsRef<[u8]>>` over a header of `$len` bytes, with its
/// constructors and length check.
macro_rules! fixed_view {
    ($(#[$doc:meta])* $len:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            #[doc = concat!(
                "Wraps a buffer without checking its length; accessors panic if it is shorter ",
                "than [`", stringify!($len), "`](crate::", stringify!($len), ")."
            )]
            pub fn new_unchecked(buffer: T) -> Packet<T> {
                Packet { buffer }
            }

            /// Wraps a buffer after [`check_len`](Self::check_len).
            pub fn new_checked(buffer: T) -> crate::Result<Packet<T>> {
                let p = Self::new_unchecked(buffer);
                p.check_len()?;
                Ok(p)
            }

            /// Ensures every accessor stays in bounds.
            pub fn check_len(&self) -> crate::Result<()> {
                let have = self.buffer.as_ref().len();
                if have < crate::$len {
                    Err(crate::Error::Truncated {
                        need: crate::$len,
                        have,
                    })
                } else {
                    Ok(())
                }
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

pub(crate) use fixed_view;
