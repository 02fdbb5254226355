//! NEXMark persons (Beam's `PersonGenerator`).

use super::strings::{Tables, US_CITIES, US_STATES, credit_card, tables};
use super::*;
use crate::data::BatchBuilder;
use crate::io::generator::Generator;

pub(crate) struct Persons {
    clock: Clock,
    time_field: usize,
    tables: &'static Tables,
    /// Reused for the email address, the one field assembled per event.
    email: String,
}

impl Persons {
    pub(crate) fn new(spec: &GeneratorSpec) -> Persons {
        Persons {
            clock: Clock::new(spec),
            time_field: spec.event_time_field,
            tables: tables(),
            email: String::new(),
        }
    }
}

impl Generator for Persons {
    fn fill(&mut self, first: u64, step: u64, n: usize, out: &mut BatchBuilder, ingest_ns: u64) {
        let t = self.tables;
        let mut card = [0u8; 19];
        for k in 0..n as u64 {
            let g = person_event(first.wrapping_add(k.wrapping_mul(step)));
            let date_time = self.clock.time_of(g);
            let mut rng = self.clock.rng(g);
            let id = last_base0_person_id(g) + FIRST_PERSON_ID;
            let name = t.names.get(rng.below(t.names.len() as u64) as usize);
            self.email.clear();
            self.email.push_str(t.next_string(&mut rng, 7));
            self.email.push('@');
            self.email.push_str(t.next_string(&mut rng, 5));
            self.email.push_str(".com");
            let card = credit_card(&mut rng, &mut card);
            let city = US_CITIES[rng.below(US_CITIES.len() as u64) as usize];
            let state = US_STATES[rng.below(US_STATES.len() as u64) as usize];
            out.column_mut(0).push_int(id);
            out.column_mut(1).push_str(name);
            out.column_mut(2).push_str(&self.email);
            out.column_mut(3).push_str(card);
            out.column_mut(4).push_str(city);
            out.column_mut(5).push_str(state);
            out.column_mut(6).push_int(date_time);
            out.column_mut(7).push_str("");
            out.finish_row_from(self.time_field, ingest_ns);
        }
    }
}
