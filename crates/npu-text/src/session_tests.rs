//! The session against a fake model that checks what the programs are fed: every
//! real row must see exactly the tokens before it, at positions 0, 1, ..., in slot order,
//! whatever mix of left padding, chunks, overlaps, decode steps and truncations led
//! there.
use super::*;
use std::any::Any;
use std::sync::{Arc, Mutex};

const V: usize = 32;

#[derive(Default)]
struct Cache {
    slots: Vec<Option<(i64, i64)>>,
}

impl DeviceState for Cache {
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
    fn read(&self, _: &str) -> npu_runtime::Result<HostTensor> {
        unimplemented!()
    }
    fn write(&mut self, _: &str, _: &HostTensor) -> npu_runtime::Result<()> {
        unimplemented!()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Runs "attention" over (token, position) pairs; logs what the last row sees.
struct Fake {
    program: Program,
    max: usize,
    seen: Arc<Mutex<Vec<Vec<i64>>>>,
}

fn io(name: &str, shape: Vec<usize>, dtype: DType) -> IoTensor {
    IoTensor {
        name: name.into(),
        shape,
        dtype,
        storage: dtype,
        donates_input: None,
    }
}

fn fake(s: usize, max: usize, seen: &Arc<Mutex<Vec<Vec<i64>>>>) -> Box<dyn Executable> {
    let program = Program {
        model_name: "fake".into(),
        target: "cpu".into(),
        compute_dtype: DType::F32,
        inputs: vec![
            io("input_ids", vec![1, s], DType::I64),
            io("attention_mask", vec![1, 1, s, max], DType::F32),
            io("position_ids", vec![1, s], DType::I64),
            io("cache_position", vec![s], DType::I64),
        ],
        outputs: vec![io("logits", vec![1, 1, V], DType::F32)],
        sources: vec![],
        weights: vec![],
        constants: vec![],
        arena_bytes: 0,
        steps: vec![],
    };
    Box::new(Fake {
        program,
        max,
        seen: seen.clone(),
    })
}

impl Executable for Fake {
    fn program(&self) -> &Program {
        &self.program
    }
    fn new_state(&self) -> Box<dyn DeviceState> {
        Box::new(Cache {
            slots: vec![None; self.max],
        })
    }
    fn run(
        &mut self,
        inputs: &[(&str, &HostTensor)],
        state: &mut dyn DeviceState,
    ) -> npu_runtime::Result<Vec<(String, HostTensor)>> {
        let get = |n: &str| inputs.iter().find(|(k, _)| *k == n).unwrap().1;
        let ids = get("input_ids").to_i64_vec();
        let pos = get("position_ids").to_i64_vec();
        let slots = get("cache_position").to_i64_vec();
        let mask = get("attention_mask").to_f32_vec();
        let cache = state.as_any_mut().downcast_mut::<Cache>().unwrap();
        for r in 0..ids.len() {
            cache.slots[slots[r] as usize] = Some((ids[r], pos[r]));
        }
        let mut last = Vec::new();
        for r in 0..ids.len() {
            let row = &mask[r * self.max..(r + 1) * self.max];
            let seen: Vec<(usize, (i64, i64))> = (0..self.max)
                .filter(|&j| row[j] == 0.0)
                .map(|j| (j, cache.slots[j].expect("attends to an unwritten slot")))
                .collect();
            // Positions 0.. in slot order, ending at the row's own slot.
            for (k, (_, (_, p))) in seen.iter().enumerate() {
                assert_eq!(*p, k as i64, "row {r}: {seen:?}");
            }
            assert_eq!(seen.last().unwrap().0, slots[r] as usize, "row {r}");
            last = seen.iter().map(|(_, (t, _))| *t).collect();
        }
        self.seen.lock().unwrap().push(last.clone());
        // The next token: the sum of what the last row sees, mod V.
        let mut logits = vec![0.0f32; V];
        logits[(last.iter().sum::<i64>() as usize) % V] = 1.0;
        Ok(vec![(
            "logits".into(),
            HostTensor::from_f32(vec![1, 1, V], &logits),
        )])
    }
}

fn session(s: usize, max: usize) -> (Session, Arc<Mutex<Vec<Vec<i64>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sess = Session::new(fake(s, max, &seen), fake(1, max, &seen)).unwrap();
    (sess, seen)
}

fn last_seen(seen: &Arc<Mutex<Vec<Vec<i64>>>>) -> Vec<u32> {
    let v = seen.lock().unwrap();
    v.last().unwrap().iter().map(|&t| t as u32).collect()
}

#[test]
fn every_schedule_feeds_the_whole_context_in_order() {
    let (mut s, seen) = session(4, 32);
    // Left-padded first prompt, then decode steps.
    s.extend(&[1, 2]).unwrap();
    assert_eq!((s.used_slots(), s.runs()), (4, (1, 0)));
    s.extend(&[3]).unwrap();
    s.extend(&[4]).unwrap();
    assert_eq!(last_seen(&seen), [1, 2, 3, 4]);
    // Seven new tokens: chunks of 4, the last one overlapping.
    s.extend(&[5, 6, 7, 8, 9, 10, 11]).unwrap();
    assert_eq!(last_seen(&seen), (1..=11).collect::<Vec<u32>>());
    assert_eq!(s.runs(), (3, 2));
    // Back to 3 tokens (pad 2 + 3 = 5 slots): 2 new tokens fill a chunk that overlaps
    // the padding.
    s.truncate(3);
    s.extend(&[20, 21]).unwrap();
    assert_eq!(last_seen(&seen), [1, 2, 3, 20, 21]);
    // Padding slots count towards a chunk: 1 token + 2 new = 5 slots, one chunk.
    s.truncate(1);
    s.extend(&[30, 31]).unwrap();
    assert_eq!(last_seen(&seen), [1, 30, 31]);
    assert_eq!(s.runs(), (5, 2));
    // No padding (a first prompt of S tokens), back to 1 token: 2 new ones cannot fill a
    // chunk (3 slots): decode steps.
    s.reset();
    s.extend(&[1, 2, 3, 4]).unwrap();
    s.truncate(1);
    s.extend(&[25, 26]).unwrap();
    assert_eq!(last_seen(&seen), [1, 25, 26]);
    assert_eq!(s.runs(), (6, 4));
    // A first prompt longer than S: chunks from slot 0, no padding.
    s.reset();
    let long: Vec<u32> = (1..=10).collect();
    let logits = s.extend(&long).unwrap();
    assert_eq!(s.used_slots(), 10);
    assert_eq!(last_seen(&seen), long);
    assert_eq!(crate::sampling::argmax(&logits), 55 % V);
}

#[test]
fn the_cache_and_the_vocabulary_are_enforced() {
    let (mut s, _) = session(4, 8);
    assert!(matches!(
        s.extend(&(0..9).collect::<Vec<u32>>()),
        Err(TextError::CacheFull { needed: 9, max: 8 })
    ));
    s.extend(&[1, 2, 3]).unwrap();
    assert_eq!(s.room(), 4);
    assert!(matches!(
        s.extend(&[1, 2, 3, 4, 5]),
        Err(TextError::CacheFull { needed: 9, max: 8 })
    ));
    assert_eq!(s.tokens(), [1, 2, 3], "a refused extension changes nothing");
    let e = s.extend(&[V as u32]).unwrap_err().to_string();
    assert!(e.contains(&format!("token {V} is outside")), "{e}");
    assert!(s.extend(&[]).is_err());
}
