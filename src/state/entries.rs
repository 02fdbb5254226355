//! One bin's state on the move or on its way to a checkpoint: its
//! `(key, value)` entries in one buffer, each as a little-endian u32 key
//! length, the key, a u32 value length, the value. This is also their
//! layout on the wire (`bin_wire`), so a migrating bin is written once by
//! the exporting operator, read front to back by the installing one, and
//! never held as one heap block per key: with a pair of `Vec`s per key, a
//! step of the migration bench spent most of its time in malloc and free
//! and in cache misses on keys written by the other core.

/// See the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BinEntries {
    bytes: Vec<u8>,
    len: usize,
}

impl BinEntries {
    pub(crate) fn new() -> BinEntries {
        BinEntries::default()
    }

    /// Appends one entry.
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.push_with(|b| b.extend_from_slice(key), |b| b.extend_from_slice(value));
    }

    /// Appends one entry whose key and value `key` and `value` write
    /// straight into the buffer (each appends to the `Vec` it is given and
    /// leaves what was there alone).
    pub(crate) fn push_with(
        &mut self,
        key: impl FnOnce(&mut Vec<u8>),
        value: impl FnOnce(&mut Vec<u8>),
    ) {
        self.framed(key);
        self.framed(value);
        self.len += 1;
    }

    /// Writes a length placeholder, then what `write` appends, then the
    /// length.
    fn framed(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 4]);
        write(&mut self.bytes);
        let n = u32::try_from(self.bytes.len() - at - 4).expect("a state entry under 4 GiB");
        self.bytes[at..at + 4].copy_from_slice(&n.to_le_bytes());
    }

    /// Entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries in the order they were pushed.
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter { rest: &self.bytes }
    }

    /// The buffer, as `append` takes it.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Appends the entries `bytes` holds in this layout (one chunk of a bin
    /// from a peer); says what is wrong with a malformed one and then
    /// appends nothing.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut rest = bytes;
        let mut n = 0;
        while !rest.is_empty() {
            take(&mut rest, "key")?;
            take(&mut rest, "value")?;
            n += 1;
        }
        self.bytes.extend_from_slice(bytes);
        self.len += n;
        Ok(())
    }

    /// The entries as one pair of `Vec`s each, the form checkpoints store.
    pub(crate) fn to_pairs(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(K, V)> for BinEntries {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> BinEntries {
        let mut out = BinEntries::new();
        for (k, v) in entries {
            out.push(k.as_ref(), v.as_ref());
        }
        out
    }
}

/// Splits the next length-prefixed field off `bytes`.
fn take<'a>(bytes: &mut &'a [u8], what: &str) -> Result<&'a [u8], String> {
    let len = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| format!("a state entry's {what} length is cut short"))?;
    let rest = &bytes[4..];
    let v = rest
        .get(..len)
        .ok_or_else(|| format!("a state entry's {what} of {len} bytes is cut short"))?;
    *bytes = &rest[len..];
    Ok(v)
}

/// Iterator over `(key, value)` of a [`BinEntries`]; also steps over
/// whole entries by their size in the buffer, for cutting it into chunks.
#[derive(Clone)]
pub(crate) struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iter<'a> {
    /// Steps over the next entry; how many bytes of the buffer it takes.
    pub(crate) fn skip_entry(&mut self) -> Option<usize> {
        let before = self.rest.len();
        self.next()?;
        Some(before - self.rest.len())
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        // The buffer was built by `push` or checked by `append`.
        let k = take(&mut self.rest, "key").expect("a well-formed buffer");
        let v = take(&mut self.rest, "value").expect("a well-formed buffer");
        Some((k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_in_order_whichever_way_they_were_written() {
        let mut e = BinEntries::new();
        e.push(b"k1", b"value one");
        e.push_with(|b| b.extend_from_slice(b"k2"), |_| {});
        e.push(b"", b"v3");
        assert_eq!(e.len(), 3);
        let got: Vec<(&[u8], &[u8])> = e.iter().collect();
        assert_eq!(
            got,
            vec![
                (&b"k1"[..], &b"value one"[..]),
                (&b"k2"[..], &b""[..]),
                (&b""[..], &b"v3"[..])
            ]
        );
        assert_eq!(e.as_bytes().len(), 8 * 3 + 2 + 9 + 2 + 2);
        assert_eq!(e.to_pairs()[0], (b"k1".to_vec(), b"value one".to_vec()));
    }

    #[test]
    fn append_takes_whole_entries_and_refuses_cut_ones_without_a_trace() {
        let src: BinEntries = [
            (b"a".to_vec(), b"1".to_vec()),
            (b"bb".to_vec(), b"22".to_vec()),
        ]
        .into_iter()
        .collect();
        let mut dst = BinEntries::new();
        dst.append(src.as_bytes()).expect("whole entries");
        assert_eq!(dst, src);
        let bytes = src.as_bytes();
        for cut in 1..bytes.len() {
            let mut d = dst.clone();
            let whole = cut == 10;
            match d.append(&bytes[..cut]) {
                Ok(()) => assert!(whole, "a cut at {cut} passed"),
                Err(e) => {
                    assert!(!whole, "{e}");
                    assert!(e.contains("cut short"), "{e}");
                    assert_eq!(d, dst, "a refused chunk left a trace");
                }
            }
        }
    }
}
