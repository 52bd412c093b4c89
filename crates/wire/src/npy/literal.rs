//! The header's dict, read as the Python literal it is (a recursive-descent reader of the
//! subset `ast.literal_eval` would accept there), never by searching its text.

use core::ops::Range;

use super::{Dtype, NpyError};

/// Deepest nesting of brackets the header parser follows (NumPy's own headers nest 1 deep).
const MAX_DEPTH: usize = 16;
/// The longest piece of a header quoted back in an error message.
const MAX_QUOTED: usize = 48;

/// Up to [`MAX_QUOTED`] bytes of header text, for a message.
pub(super) fn quote(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(MAX_QUOTED)]).into_owned();
    if b.len() > MAX_QUOTED {
        s + "..."
    } else {
        s
    }
}

/// The Python literals a header can hold (a subset of what `ast.literal_eval` reads).
#[derive(Debug)]
enum Value {
    Str(String),
    /// `None` when it does not fit an `i128`.
    Int(Option<i128>),
    Bool(bool),
    None,
    Tuple(Vec<Value>),
    /// Its items are read and dropped: no header value may be a list.
    List,
    /// Keys, values and the text span of each value.
    Dict(Vec<(Value, Value, Range<usize>)>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Str(_) => "a string",
            Value::Int(_) => "an integer",
            Value::Bool(_) => "a boolean",
            Value::None => "None",
            Value::Tuple(_) => "a tuple",
            Value::List => "a list",
            Value::Dict(_) => "a dict",
        }
    }
}

/// A recursive-descent reader of Python literals over the header text.
struct Reader<'a> {
    text: &'a [u8],
    pos: usize,
    depth: usize,
}

type ReadResult<T> = Result<T, NpyError>;

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn error(&self, why: impl core::fmt::Display) -> NpyError {
        NpyError::BadHeader(format!("{why} at byte {} of the header text", self.pos))
    }

    fn skip_space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c') = self.peek() {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> ReadResult<Value> {
        self.skip_space();
        match self.peek() {
            None => Err(self.error("unexpected end")),
            Some(q @ (b'\'' | b'"')) => self.string(q),
            Some(b'0'..=b'9' | b'-' | b'+') => self.int(),
            Some(b'(') => self.sequence(b')').map(|(mut items, comma)| {
                // `(x)` is `x`: only a comma makes a tuple.
                if items.len() == 1 && !comma {
                    items.pop().unwrap_or(Value::None)
                } else {
                    Value::Tuple(items)
                }
            }),
            Some(b'[') => self.sequence(b']').map(|_| Value::List),
            Some(b'{') => self.dict(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.pos += 1;
                }
                match &self.text[start..self.pos] {
                    b"True" => Ok(Value::Bool(true)),
                    b"False" => Ok(Value::Bool(false)),
                    b"None" => Ok(Value::None),
                    name => {
                        self.pos = start;
                        Err(self.error(format_args!("unexpected name '{}'", quote(name))))
                    }
                }
            }
            Some(c) => Err(self.error(format_args!("unexpected character {:?}", char::from(c)))),
        }
    }

    fn string(&mut self, quote_char: u8) -> ReadResult<Value> {
        let start = self.pos;
        self.pos += 1;
        let mut bytes = Vec::new();
        loop {
            match self.peek() {
                None | Some(b'\n') => {
                    self.pos = start;
                    return Err(self.error("unterminated string"));
                }
                Some(b'\\') => {
                    // An escaped character stands for itself (NumPy's names need no escapes).
                    self.pos += 1;
                    if let Some(c) = self.peek() {
                        bytes.push(c);
                        self.pos += 1;
                    }
                }
                Some(c) if c == quote_char => {
                    self.pos += 1;
                    return Ok(Value::Str(String::from_utf8_lossy(&bytes).into_owned()));
                }
                Some(c) => {
                    bytes.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn int(&mut self) -> ReadResult<Value> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if matches!(self.peek(), Some(b'-' | b'+')) {
            self.pos += 1;
        }
        let mut v: Option<i128> = Some(0);
        let mut digits = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            let d = i128::from(c - b'0');
            v = v.and_then(|v| v.checked_mul(10)).and_then(|v| {
                if negative {
                    v.checked_sub(d)
                } else {
                    v.checked_add(d)
                }
            });
            digits += 1;
            self.pos += 1;
        }
        // Python 2 wrote long integers as `3L`.
        if digits > 0 && matches!(self.peek(), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        let bad_end = self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_');
        if digits == 0 || bad_end {
            self.pos = start;
            return Err(self.error("expected an integer"));
        }
        Ok(Value::Int(v))
    }

    fn enter(&mut self) -> ReadResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format_args!("nested deeper than {MAX_DEPTH}")));
        }
        self.pos += 1;
        Ok(())
    }

    /// A tuple or list up to `close`; says whether a comma was seen.
    fn sequence(&mut self, close: u8) -> ReadResult<(Vec<Value>, bool)> {
        self.enter()?;
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            self.skip_space();
            if self.peek() == Some(close) {
                break;
            }
            items.push(self.value()?);
            self.skip_space();
            match self.peek() {
                Some(b',') => {
                    comma = true;
                    self.pos += 1;
                }
                Some(c) if c == close => break,
                None => return Err(self.error("unexpected end")),
                _ => {
                    return Err(self.error(format_args!("expected ',' or '{}'", char::from(close))))
                }
            }
        }
        self.pos += 1;
        self.depth -= 1;
        Ok((items, comma))
    }

    fn dict(&mut self) -> ReadResult<Value> {
        self.enter()?;
        let mut entries = Vec::new();
        loop {
            self.skip_space();
            if self.peek() == Some(b'}') {
                break;
            }
            let key = self.value()?;
            self.skip_space();
            if self.peek() != Some(b':') {
                return Err(self.error(if self.peek().is_none() {
                    "unexpected end"
                } else {
                    "expected ':' after a key"
                }));
            }
            self.pos += 1;
            self.skip_space();
            let start = self.pos;
            let value = self.value()?;
            entries.push((key, value, start..self.pos));
            self.skip_space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => break,
                None => return Err(self.error("unexpected end")),
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
        self.pos += 1;
        self.depth -= 1;
        Ok(Value::Dict(entries))
    }
}

/// The three values of a header dict.
pub(super) fn parse_dict(text: &[u8]) -> Result<(Dtype, bool, Vec<usize>), NpyError> {
    let bad = |m: String| NpyError::BadHeader(m);
    let mut r = Reader {
        text,
        pos: 0,
        depth: 0,
    };
    let dict = r.value()?;
    r.skip_space();
    if r.pos != text.len() {
        return Err(r.error("unexpected text after the dict"));
    }
    let Value::Dict(entries) = dict else {
        return Err(bad(format!("the header is {}, not a dict", dict.kind())));
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value, span) in entries {
        let Value::Str(key) = key else {
            return Err(bad(format!("a key is {}, not a string", key.kind())));
        };
        let slot = match key.as_str() {
            "descr" => &mut descr,
            "fortran_order" => &mut fortran,
            "shape" => &mut shape,
            _ => {
                return Err(bad(format!(
                    "unexpected key '{}' (a .npy header has 'descr', 'fortran_order' and 'shape')",
                    quote(key.as_bytes())
                )))
            }
        };
        if slot.replace((value, span)).is_some() {
            return Err(bad(format!("key '{key}' appears twice")));
        }
    }
    let missing = |k: &str| bad(format!("no '{k}' key"));
    let (descr, span) = descr.ok_or_else(|| missing("descr"))?;
    let descr = match descr {
        Value::Str(s) => Dtype::from_descr(&s)?,
        // A structured dtype is a list of fields; quote it as written.
        _ => return Err(NpyError::UnsupportedDtype(quote(&text[span]))),
    };
    let fortran = match fortran.ok_or_else(|| missing("fortran_order"))?.0 {
        Value::Bool(b) => b,
        v => {
            return Err(bad(format!(
                "'fortran_order' is {}, not True or False",
                v.kind()
            )))
        }
    };
    let shape = match shape.ok_or_else(|| missing("shape"))?.0 {
        Value::Tuple(items) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(Some(n)) => usize::try_from(n).map_err(|_| {
                    bad(format!(
                        "shape entry {n} is {}",
                        if n < 0 { "negative" } else { "too large" }
                    ))
                }),
                Value::Int(None) => Err(bad("a shape entry is too large".into())),
                v => Err(bad(format!("a shape entry is {}, not a size", v.kind()))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        v => return Err(bad(format!("'shape' is {}, not a tuple", v.kind()))),
    };
    Ok((descr, fortran, shape))
}
