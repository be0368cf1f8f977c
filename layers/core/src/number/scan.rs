//! The scan that finds, in JSON text, every number literal its parsed value does not
//! reproduce (an integer past 64 bits, a re-spelled double), by position. Never recurses.

use super::*;

#[derive(Debug)]
enum Frame {
    Object {
        node: HashMap<String, Node>,
        key: Option<String>,
        expect_key: bool,
    },
    Array {
        node: HashMap<usize, Node>,
        index: usize,
    },
}

/// Where a value goes in its parent (`None`: it is the root).
#[derive(Debug)]
enum Slot {
    Key(String),
    Index(usize),
}

#[derive(Debug, Default)]
pub(super) struct Scanner {
    stack: Vec<(Frame, Option<Slot>)>,
    root: Option<Node>,
}

impl Scanner {
    pub(super) fn run(mut self, text: &str) -> NumberLiterals {
        let bytes = text.as_bytes();
        let mut i = 0usize;
        while let Some(&b) = bytes.get(i) {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b':' => i += 1,
                b',' => {
                    match self.stack.last_mut() {
                        Some((Frame::Array { index, .. }, _)) => *index += 1,
                        Some((Frame::Object { expect_key, .. }, _)) => *expect_key = true,
                        None => break,
                    }
                    i += 1;
                }
                b'{' | b'[' => {
                    let slot = self.begin_value();
                    let frame = if b == b'{' {
                        Frame::Object {
                            node: HashMap::new(),
                            key: None,
                            expect_key: true,
                        }
                    } else {
                        Frame::Array {
                            node: HashMap::new(),
                            index: 0,
                        }
                    };
                    self.stack.push((frame, slot));
                    i += 1;
                }
                b'}' | b']' => {
                    let Some((frame, slot)) = self.stack.pop() else {
                        break;
                    };
                    let node = match frame {
                        Frame::Object { node, .. } if !node.is_empty() => Some(Node::Object(node)),
                        Frame::Array { node, .. } if !node.is_empty() => Some(Node::Array(node)),
                        _ => None,
                    };
                    if let Some(node) = node {
                        self.put(slot, node);
                    }
                    i += 1;
                }
                b'"' => {
                    let Some(end) = string_end(bytes, i) else {
                        break;
                    };
                    let is_key = matches!(
                        self.stack.last(),
                        Some((
                            Frame::Object {
                                expect_key: true,
                                ..
                            },
                            _
                        ))
                    );
                    if is_key {
                        let key: Option<String> =
                            text.get(i..=end).and_then(|s| serde_json::from_str(s).ok());
                        let Some(key) = key else {
                            break;
                        };
                        if let Some((
                            Frame::Object {
                                key: k, expect_key, ..
                            },
                            _,
                        )) = self.stack.last_mut()
                        {
                            *k = Some(key);
                            *expect_key = false;
                        }
                    } else {
                        self.begin_value();
                    }
                    i = end + 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = i;
                    while bytes.get(i).is_some_and(|c| {
                        matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                    }) {
                        i += 1;
                    }
                    let slot = self.begin_value();
                    if let Some(leaf) = text.get(start..i).and_then(leaf) {
                        self.put(slot, leaf);
                    }
                }
                b't' | b'f' | b'n' => {
                    self.begin_value();
                    while bytes.get(i).is_some_and(u8::is_ascii_alphabetic) {
                        i += 1;
                    }
                }
                _ => break,
            }
        }
        NumberLiterals { root: self.root }
    }

    /// A value starts at the current position: a repeated key forgets what its earlier
    /// value recorded (the last duplicate wins, as in serde_json).
    fn begin_value(&mut self) -> Option<Slot> {
        match self.stack.last_mut()? {
            (Frame::Array { index, .. }, _) => Some(Slot::Index(*index)),
            (Frame::Object { node, key, .. }, _) => {
                let k = key.take()?;
                node.remove(&k);
                Some(Slot::Key(k))
            }
        }
    }

    fn put(&mut self, slot: Option<Slot>, node: Node) {
        match (self.stack.last_mut(), slot) {
            (None, None) => self.root = Some(node),
            (Some((Frame::Object { node: m, .. }, _)), Some(Slot::Key(k))) => {
                m.insert(k, node);
            }
            (Some((Frame::Array { node: m, .. }, _)), Some(Slot::Index(n))) => {
                m.insert(n, node);
            }
            _ => {}
        }
    }
}

/// The index of the closing quote of the string that opens at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        match bytes.get(i)? {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
}

/// A leaf for a literal the parsed number does not reproduce, or `None`.
fn leaf(text: &str) -> Option<Node> {
    let integer = !text.contains(['.', 'e', 'E']);
    // Fast path: a short integer literal is an `i64` serde_json writes back unchanged.
    if integer && text.len() <= 18 && !text.starts_with("-0") {
        return None;
    }
    let n: Number = serde_json::from_str(text).ok()?;
    if n.to_string() == text {
        return None;
    }
    Some(Node::Leaf {
        text: text.into(),
        read: n.as_f64()?,
    })
}
