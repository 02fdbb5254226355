//! The bytes of a migrating bin's state on the wire: its entries in the
//! layout of [`BinEntries`] (a little-endian u32 key length, the key, a u32
//! value length, the value), cut into chunks of whole entries. A chunk is
//! at most `limit` bytes unless one entry alone is larger (then it is a
//! chunk of its own).

use crate::state::BinEntries;

/// `entries` as chunks of at most `limit` bytes each; at least one chunk
/// (an empty bin still travels, so the new owner learns it arrived).
pub(crate) fn encode_chunks(entries: &BinEntries, limit: usize) -> Vec<Vec<u8>> {
    let bytes = entries.as_bytes();
    let mut chunks = Vec::new();
    let (mut start, mut end) = (0, 0);
    let mut it = entries.iter();
    while let Some(n) = it.skip_entry() {
        if end > start && end - start + n > limit {
            chunks.push(bytes[start..end].to_vec());
            start = end;
        }
        end += n;
    }
    if end > start || chunks.is_empty() {
        chunks.push(bytes[start..end].to_vec());
    }
    chunks
}

/// Appends the entries of one chunk to `out`; says what is wrong with a
/// malformed chunk (it came from a peer).
pub(crate) fn decode_chunk(bytes: &[u8], out: &mut BinEntries) -> Result<(), String> {
    out.append(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(Vec<u8>, Vec<u8>)]) -> BinEntries {
        pairs.iter().map(|(k, v)| (k, v)).collect()
    }

    #[test]
    fn chunks_round_trip_within_the_limit() {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..1000u32)
            .map(|i| (i.to_le_bytes().to_vec(), vec![i as u8; (i % 97) as usize]))
            .collect();
        let chunks = encode_chunks(&entries(&pairs), 4096);
        assert!(chunks.len() > 5, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.len() <= 4096));
        let mut back = BinEntries::new();
        for c in &chunks {
            decode_chunk(c, &mut back).expect("decodes");
        }
        assert_eq!(back.to_pairs(), pairs);
        // An empty bin is one empty chunk; an entry over the limit is
        // alone in its chunk.
        assert_eq!(
            encode_chunks(&BinEntries::new(), 4096),
            vec![Vec::<u8>::new()]
        );
        let big = entries(&[(vec![1], vec![0; 10_000]), (vec![2], vec![3])]);
        assert_eq!(encode_chunks(&big, 4096).len(), 2);
    }

    #[test]
    fn malformed_chunks_are_errors() {
        let mut out = BinEntries::new();
        assert!(decode_chunk(&[1, 0], &mut out).is_err());
        assert!(decode_chunk(&[9, 0, 0, 0, 1], &mut out).is_err());
        assert!(decode_chunk(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff], &mut out).is_err());
        let ok = encode_chunks(&entries(&[(vec![1, 2], vec![3])]), 100);
        decode_chunk(&ok[0], &mut out).expect("valid");
        assert_eq!(out.to_pairs(), vec![(vec![1, 2], vec![3])]);
    }
}
