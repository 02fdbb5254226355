//! The bytes of a migrating bin's state on the wire: its entries cut into
//! chunks of whole entries, each entry as a little-endian u32 key length,
//! the key, a u32 value length, the value. A chunk is at most `limit`
//! bytes unless one entry alone is larger (then it is a chunk of its own).

use super::migration::BinState;

/// Bytes an entry takes on the wire.
fn entry_len(k: &[u8], v: &[u8]) -> usize {
    8 + k.len() + v.len()
}

/// `entries` as chunks of at most `limit` bytes each; at least one chunk
/// (an empty bin still travels, so the new owner learns it arrived).
pub(crate) fn encode_chunks(entries: &[(Vec<u8>, Vec<u8>)], limit: usize) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut cur = Vec::new();
    for (k, v) in entries {
        if !cur.is_empty() && cur.len() + entry_len(k, v) > limit {
            chunks.push(std::mem::take(&mut cur));
        }
        cur.extend_from_slice(&(k.len() as u32).to_le_bytes());
        cur.extend_from_slice(k);
        cur.extend_from_slice(&(v.len() as u32).to_le_bytes());
        cur.extend_from_slice(v);
    }
    if !cur.is_empty() || chunks.is_empty() {
        chunks.push(cur);
    }
    chunks
}

/// Appends the entries of one chunk to `out`; says what is wrong with a
/// malformed chunk (it came from a peer).
pub(crate) fn decode_chunk(mut bytes: &[u8], out: &mut BinState) -> Result<(), String> {
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
    while !bytes.is_empty() {
        let k = take(&mut bytes, "key")?;
        let v = take(&mut bytes, "value")?;
        out.push((k.to_vec(), v.to_vec()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_within_the_limit() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..1000u32)
            .map(|i| (i.to_le_bytes().to_vec(), vec![i as u8; (i % 97) as usize]))
            .collect();
        let chunks = encode_chunks(&entries, 4096);
        assert!(chunks.len() > 5, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.len() <= 4096));
        let mut back = Vec::new();
        for c in &chunks {
            decode_chunk(c, &mut back).expect("decodes");
        }
        assert_eq!(back, entries);
        // An empty bin is one empty chunk; an entry over the limit is
        // alone in its chunk.
        assert_eq!(encode_chunks(&[], 4096), vec![Vec::<u8>::new()]);
        let big = vec![(vec![1], vec![0; 10_000]), (vec![2], vec![3])];
        assert_eq!(encode_chunks(&big, 4096).len(), 2);
    }

    #[test]
    fn malformed_chunks_are_errors() {
        let mut out = Vec::new();
        assert!(decode_chunk(&[1, 0], &mut out).is_err());
        assert!(decode_chunk(&[9, 0, 0, 0, 1], &mut out).is_err());
        assert!(decode_chunk(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff], &mut out).is_err());
        let ok = encode_chunks(&[(vec![1, 2], vec![3])], 100);
        decode_chunk(&ok[0], &mut out).expect("valid");
        assert_eq!(out, vec![(vec![1, 2], vec![3])]);
    }
}
