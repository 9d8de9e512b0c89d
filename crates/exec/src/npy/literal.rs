//! The Python literals of a `.npy` header dictionary: strings, booleans, integers, tuples
//! and dictionaries, parsed without evaluating anything.

/// A Python literal as it occurs in a `.npy` header.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Literal {
    Str(String),
    Bool(bool),
    Int(usize),
    Tuple(Vec<Literal>),
    List(Vec<Literal>),
    Dict(Vec<(String, Literal)>),
}

impl Literal {
    pub(super) fn describe(&self) -> String {
        match self {
            Literal::Str(s) => format!("'{s}'"),
            Literal::Bool(b) => if *b { "True" } else { "False" }.into(),
            Literal::Int(n) => n.to_string(),
            Literal::Tuple(v) => format!("({} items)", v.len()),
            Literal::List(v) => format!("[{} fields]", v.len()),
            Literal::Dict(v) => format!("{{{} keys}}", v.len()),
        }
    }

    pub(super) fn parse(text: &str) -> Result<Literal, String> {
        let mut p = LitParser {
            s: text.as_bytes(),
            pos: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.pos != p.s.len() {
            return Err(format!("unexpected text at byte {}", p.pos));
        }
        Ok(v)
    }
}

/// A recursive-descent parser of the Python literal subset NumPy writes.
struct LitParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl LitParser<'_> {
    fn ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn value(&mut self) -> Result<Literal, String> {
        match self.peek() {
            Some(b'{') => self.seq(b'}').map(|items| {
                Literal::Dict(
                    items
                        .into_iter()
                        .map(|(k, v)| (k.unwrap_or_default(), v))
                        .collect(),
                )
            }),
            Some(b'(') => self
                .seq(b')')
                .map(|items| Literal::Tuple(items.into_iter().map(|(_, v)| v).collect())),
            Some(b'[') => self
                .seq(b']')
                .map(|items| Literal::List(items.into_iter().map(|(_, v)| v).collect())),
            Some(q @ (b'\'' | b'"')) => self.string(q).map(Literal::Str),
            Some(c) if c.is_ascii_digit() => self.int(),
            Some(b'T') => self.word("True", Literal::Bool(true)),
            Some(b'F') => self.word("False", Literal::Bool(false)),
            Some(c) => Err(format!("unexpected '{}' at byte {}", c as char, self.pos)),
            None => Err("unexpected end".into()),
        }
    }

    /// A bracketed, comma-separated sequence; for dicts every item is `'key': value`.
    fn seq(&mut self, close: u8) -> Result<Vec<(Option<String>, Literal)>, String> {
        let is_dict = close == b'}';
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(items);
            }
            let key = if is_dict {
                let k = match self.value()? {
                    Literal::Str(k) => k,
                    _ => {
                        return Err(format!(
                            "dictionary key is not a string at byte {}",
                            self.pos
                        ))
                    }
                };
                if self.peek() != Some(b':') {
                    return Err(format!("expected ':' at byte {}", self.pos));
                }
                self.pos += 1;
                Some(k)
            } else {
                None
            };
            let v = self.value()?;
            items.push((key, v));
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => {
                    return Err(format!(
                        "expected ',' or '{}' at byte {}",
                        close as char, self.pos
                    ))
                }
            }
        }
    }

    fn string(&mut self, quote: u8) -> Result<String, String> {
        let start = self.pos + 1;
        let mut i = start;
        while i < self.s.len() && self.s[i] != quote {
            if self.s[i] == b'\\' {
                return Err(format!("escape sequences are not supported (byte {i})"));
            }
            i += 1;
        }
        if i >= self.s.len() {
            return Err("unterminated string".into());
        }
        self.pos = i + 1;
        std::str::from_utf8(&self.s[start..i])
            .map(str::to_string)
            .map_err(|_| "string is not UTF-8".into())
    }

    fn int(&mut self) -> Result<Literal, String> {
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        let digits = std::str::from_utf8(&self.s[start..self.pos]).map_err(|e| e.to_string())?;
        let n: usize = digits
            .parse()
            .map_err(|_| format!("integer {digits} does not fit in usize"))?;
        // Python 2 wrote long integers with an `L` suffix.
        if self.s.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        Ok(Literal::Int(n))
    }

    fn word(&mut self, w: &str, v: Literal) -> Result<Literal, String> {
        if self.s[self.pos..].starts_with(w.as_bytes()) {
            self.pos += w.len();
            Ok(v)
        } else {
            Err(format!("unexpected word at byte {}", self.pos))
        }
    }
}
