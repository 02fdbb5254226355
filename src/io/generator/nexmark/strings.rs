//! The string tables NEXMark records are assembled from, built once per
//! process so that generating an event only copies slices.

use std::sync::OnceLock;

use crate::io::generator::mix::{EventRng, event_hash};

/// Beam's `nextString`: at least this many characters before trimming.
const MIN_STRING_LENGTH: u64 = 3;
/// Random text that `next_string` takes slices of; 64 KiB stays in L2.
const POOL_LEN: usize = 1 << 16;
const POOL_SLACK: usize = 128;

const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];
pub(super) const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
pub(super) const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

pub(super) const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// A bid names a hot channel with probability `1 - 1 / HOT_CHANNELS_RATIO`.
pub(super) const HOT_CHANNELS_RATIO: u64 = 2;
/// Otherwise one of this many `channel-{n}` channels.
pub(super) const CHANNELS_NUMBER: u64 = 10_000;

/// Fixed seeds for the tables: they are part of the data set's definition,
/// the same for every seed and every run.
const POOL_SEED: u64 = 0x5EED_0001;
const URL_SEED: u64 = 0x5EED_0002;

/// Many short strings in one allocation.
pub(super) struct StrTable {
    text: String,
    ends: Vec<u32>,
}

impl StrTable {
    fn new() -> StrTable {
        StrTable {
            text: String::new(),
            ends: Vec::new(),
        }
    }

    fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len() as u32);
    }

    #[inline]
    pub(super) fn get(&self, k: usize) -> &str {
        let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
        &self.text[start..self.ends[k] as usize]
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }
}

pub(super) struct Tables {
    /// Lowercase letters with one space in 13, like Beam's `nextString`.
    pool: String,
    /// `"{first} {last}"` for every pair, indexed `first * 9 + last`.
    pub(super) names: StrTable,
    pub(super) hot_urls: StrTable,
    pub(super) channels: StrTable,
    pub(super) channel_urls: StrTable,
}

pub(super) fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(Tables::build)
}

impl Tables {
    fn build() -> Tables {
        let mut rng = EventRng::new(event_hash(POOL_SEED, 0));
        let pool = (0..POOL_LEN + POOL_SLACK)
            .map(|_| random_char(&mut rng, ' '))
            .collect();
        let mut names = StrTable::new();
        for first in FIRST_NAMES {
            for last in LAST_NAMES {
                names.push(&format!("{first} {last}"));
            }
        }
        let mut hot_urls = StrTable::new();
        for c in 0..HOT_CHANNELS.len() as u64 {
            hot_urls.push(&base_url(&mut EventRng::new(event_hash(
                URL_SEED,
                u64::MAX - c,
            ))));
        }
        // nexmark/nexmark's `getNextChannelAndurl`: a base url, and for 9
        // channels in 10 a `channel_id` of the bit-reversed channel number.
        let mut channels = StrTable::new();
        let mut channel_urls = StrTable::new();
        for n in 0..CHANNELS_NUMBER {
            let mut rng = EventRng::new(event_hash(URL_SEED, n));
            channels.push(&format!("channel-{n}"));
            let mut url = base_url(&mut rng);
            if rng.below(10) > 0 {
                // Java's `Math.abs(Integer.reverse(n))`, overflow included.
                url.push_str(&format!(
                    "&channel_id={}",
                    (n as i32).reverse_bits().wrapping_abs()
                ));
            }
            channel_urls.push(&url);
        }
        Tables {
            pool,
            names,
            hot_urls,
            channels,
            channel_urls,
        }
    }

    /// Beam's `nextString(random, max_len)`: 3..max_len-1 random letters
    /// and spaces, trimmed; here a slice of the pool at a random offset.
    #[inline]
    pub(super) fn next_string(&self, rng: &mut EventRng, max_len: u64) -> &str {
        let len = (MIN_STRING_LENGTH + rng.below(max_len - MIN_STRING_LENGTH)) as usize;
        debug_assert!(len <= POOL_SLACK);
        let start = rng.below(POOL_LEN as u64) as usize;
        self.pool[start..start + len].trim_matches(' ')
    }
}

fn random_char(rng: &mut EventRng, special: char) -> char {
    if rng.below(13) == 0 {
        special
    } else {
        (b'a' + rng.below(26) as u8) as char
    }
}

/// nexmark/nexmark's `getBaseUrl`: three random path parts with `_` as the
/// "space".
fn base_url(rng: &mut EventRng) -> String {
    let mut url = String::from("https://www.nexmark.com/");
    for _ in 0..3 {
        let len = MIN_STRING_LENGTH + rng.below(5 - MIN_STRING_LENGTH);
        url.extend((0..len).map(|_| random_char(rng, '_')));
        url.push('/');
    }
    url.push_str("item.htm?query=1");
    url
}

/// Beam's credit card: four groups of four digits (`%04d`) separated by
/// spaces, written into `buf`.
#[inline]
pub(super) fn credit_card<'a>(rng: &mut EventRng, buf: &'a mut [u8; 19]) -> &'a str {
    for group in 0..4 {
        let mut x = rng.below(10_000);
        let at = group * 5;
        for d in (0..4).rev() {
            buf[at + d] = b'0' + (x % 10) as u8;
            x /= 10;
        }
        if group < 3 {
            buf[at + 4] = b' ';
        }
    }
    std::str::from_utf8(buf).expect("ascii digits and spaces")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_beams_shapes() {
        let t = tables();
        assert_eq!(t.names.len(), 99);
        assert_eq!(t.names.get(0), "Peter Shultz");
        assert_eq!(t.channels.len(), CHANNELS_NUMBER as usize);
        assert_eq!(t.channels.get(42), "channel-42");
        let url = t.channel_urls.get(42);
        assert!(
            url.starts_with("https://www.nexmark.com/") && url.contains("item.htm?query=1"),
            "{url}"
        );
        let with_id = (0..t.channel_urls.len())
            .filter(|&k| t.channel_urls.get(k).contains("&channel_id="))
            .count();
        assert!((8_500..9_500).contains(&with_id), "{with_id}");
        let mut rng = EventRng::new(1);
        for _ in 0..1000 {
            let s = t.next_string(&mut rng, 20);
            assert!(s.len() <= 19 && !s.starts_with(' ') && !s.ends_with(' '));
            assert!(s.bytes().all(|b| b == b' ' || b.is_ascii_lowercase()));
        }
        let mut buf = [0u8; 19];
        let cc = credit_card(&mut rng, &mut buf);
        assert_eq!(cc.len(), 19);
        assert!(
            cc.split(' ')
                .all(|g| g.len() == 4 && g.bytes().all(|b| b.is_ascii_digit()))
        );
    }
}
