//! Byte-level mutations (libFuzzer-style) and a small deterministic RNG: no dependencies.

/// xorshift64*: fast, deterministic from its seed, good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// Integers that find boundary bugs: 0, 1, -1, powers of two around type limits.
const INTERESTING: [i64; 16] = [
    0,
    1,
    -1,
    2,
    7,
    8,
    9,
    255,
    65535,
    65536,
    i32::MAX as i64,
    1 << 32,
    1 << 40,
    i64::MAX,
    i64::MIN,
    -2,
];

/// Textual tokens worth splicing into JSON.
const TOKENS: [&str; 16] = [
    "NaN",
    "Infinity",
    "-Infinity",
    "null",
    "[]",
    "{}",
    "\"\"",
    "-1",
    "4294967296",
    "9223372036854775807",
    "1e308",
    "true",
    "\"float32\"",
    "\"int64\"",
    "[4294967296, 4294967296]",
    "\"\\u0000\"",
];

/// Applies 1..=4 random mutations to `data`, drawing splice material from `other`.
pub fn mutate(data: &mut Vec<u8>, other: &[u8], rng: &mut Rng, max_len: usize) {
    let n = 1 + rng.below(4);
    for _ in 0..n {
        match rng.below(11) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next_u64() as u8;
            }
            2 if !data.is_empty() => {
                // delete a run
                let i = rng.below(data.len());
                let len = 1 + rng.below((data.len() - i).min(64));
                data.drain(i..i + len);
            }
            3 => {
                // insert random bytes
                let i = rng.below(data.len() + 1);
                let len = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                data.splice(i..i, bytes);
            }
            4 if !data.is_empty() => {
                // duplicate a run
                let i = rng.below(data.len());
                let len = 1 + rng.below((data.len() - i).min(256));
                let run = data[i..i + len].to_vec();
                let at = rng.below(data.len() + 1);
                data.splice(at..at, run);
            }
            5 if !data.is_empty() => {
                // overwrite with an interesting little-endian integer
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let width = [1, 2, 4, 8][rng.below(4)];
                let i = rng.below(data.len());
                for (k, b) in v.to_le_bytes().iter().take(width).enumerate() {
                    if let Some(x) = data.get_mut(i + k) {
                        *x = *b;
                    }
                }
            }
            6 => replace_number(data, rng),
            7 => {
                // splice a JSON token at a random place
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let i = rng.below(data.len() + 1);
                if rng.chance(2) && i < data.len() {
                    let end = (i + 1 + rng.below(8)).min(data.len());
                    data.splice(i..end, t.iter().copied());
                } else {
                    data.splice(i..i, t.iter().copied());
                }
            }
            8 if !other.is_empty() => {
                // crossover with another corpus entry
                let i = rng.below(other.len());
                let len = 1 + rng.below((other.len() - i).min(512));
                let at = rng.below(data.len() + 1);
                let end = (at + rng.below(len + 1)).min(data.len());
                data.splice(at..end, other[i..i + len].iter().copied());
            }
            9 if !data.is_empty() => {
                // truncate
                let len = rng.below(data.len());
                data.truncate(len);
            }
            _ => {
                // swap two bytes
                if data.len() > 1 {
                    let (a, b) = (rng.below(data.len()), rng.below(data.len()));
                    data.swap(a, b);
                }
            }
        }
    }
    data.truncate(max_len);
}

/// Replaces one decimal number in text by an interesting value.
fn replace_number(data: &mut Vec<u8>, rng: &mut Rng) {
    if data.is_empty() {
        return;
    }
    let start = rng.below(data.len());
    let Some(off) = data[start..].iter().position(|b| b.is_ascii_digit()) else {
        return;
    };
    let i = start + off;
    let mut j = i;
    while j < data.len() && data[j].is_ascii_digit() {
        j += 1;
    }
    let v = INTERESTING[rng.below(INTERESTING.len())];
    let s = if rng.chance(3) {
        (rng.below(20) as i64).to_string()
    } else {
        v.to_string()
    };
    data.splice(i..j, s.bytes());
}

/// Reads structured values from raw fuzz bytes, `arbitrary`-style: each call consumes
/// bytes and never fails (an exhausted input yields zeros).
pub struct Unstructured<'a> {
    data: &'a [u8],
}

impl<'a> Unstructured<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Unstructured { data }
    }
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    /// A small number mostly, an extreme one sometimes.
    pub fn dim(&mut self) -> usize {
        match self.byte() {
            0..=239 => self.byte() as usize % 9,
            240..=247 => self.u32() as usize,
            248..=251 => 1 << (self.byte() % 63),
            _ => usize::MAX >> (self.byte() % 8),
        }
    }
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_within_bounds() {
        let mut rng = Rng::new(7);
        let seed = br#"{"a": [1, 2, 3], "b": "x"}"#.to_vec();
        for _ in 0..10_000 {
            let mut d = seed.clone();
            mutate(&mut d, &seed, &mut rng, 64);
            assert!(d.len() <= 64);
        }
        let mut u = Unstructured::new(&[1, 2]);
        assert_eq!(u.byte(), 1);
        assert_eq!(u.u32(), 2);
        assert!(u.is_empty());
    }
}
