//! What a component's checkpointed state means, as one number. A restart
//! or a reload installs a component's state only if its signature is the
//! one recorded with the state: a window whose key or aggregates changed,
//! or a file source reading another file, starts empty instead of decoding
//! state that no longer fits it.

use std::fmt::Write;

use super::{OpSpec, Plan};
use crate::kernel::hash::hash_bytes;

/// The signature of node `n`'s state (its layout and what it refers to);
/// equal signatures mean the state recorded by one run can be installed
/// in another.
pub(crate) fn state_signature(plan: &Plan, n: usize) -> u64 {
    let node = &plan.nodes[n];
    let mut s = format!("{}:", node.type_name);
    // Writing to a String cannot fail.
    let _ = match &node.op {
        OpSpec::Window(w) => {
            let keys = w.key.types().len();
            let key_fields: Vec<_> = w.output.fields()[..keys]
                .iter()
                .map(|f| (&f.name, f.ty))
                .collect();
            let aggs: Vec<_> = w.aggregates.iter().map(|a| (a.func, a.output)).collect();
            write!(s, "{key_fields:?} {:?} {aggs:?}", w.kind)
        }
        OpSpec::Join(j) => write!(
            s,
            "{:?} {:?} {:?} {} {} {:?}",
            j.left_key,
            j.right_key,
            j.mode,
            j.left_width,
            j.right_width,
            input_schemas(plan, n)
        ),
        // A generator's position is an index into its sequence: the rate
        // may change, the sequence may not.
        OpSpec::Generator(g) => write!(s, "{:?} {:?}", g.spec, g.count),
        OpSpec::FileSource(l) => write!(s, "{:?} {:?}", l.path, l.format),
        // The broker keeps the session (what is not acknowledged) by
        // client id.
        OpSpec::MqttSource(m) => write!(
            s,
            "{}:{} {} {:?}",
            m.conn.host, m.conn.port, m.conn.client_id, m.topics
        ),
        OpSpec::FileSink {
            path,
            format,
            exactly_once,
        } => write!(s, "{path:?} {format:?} {exactly_once}"),
        OpSpec::Stdin(_)
        | OpSpec::Filter(_)
                | OpSpec::Map(..)
        | OpSpec::Project(_)
        | OpSpec::Stdout { .. }
        | OpSpec::MqttSink(_)
        | OpSpec::Blackhole
        // Network sources keep no position (they cannot replay); network
        // sinks keep nothing.
        | OpSpec::NetSource(_)
        | OpSpec::NetSink(_) => Ok(()),
    };
    hash_bytes(s.as_bytes())
}

/// The schemas of node `n`'s inputs, for state that stores whole rows.
fn input_schemas(plan: &Plan, n: usize) -> Vec<String> {
    plan.nodes[n]
        .inputs
        .iter()
        .map(|i| format!("{:?}", plan.nodes[i.from].outputs[i.from_port].schema))
        .collect()
}
