//! Building the [`Plan`]: walk the components in topological order,
//! derive each stream's schema and type-check everything against it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::expr::{self, AggFunc, ExprError};
use super::*;
use crate::config::{
    Component, Config, Context, Diagnostics, EventTime, SchemaDecl, Section, Sp, Spec,
};
use crate::data::{DataType, Field, KeySpec, Schema};

/// What the planner knows about a stream while building.
#[derive(Clone)]
struct StreamInfo {
    node: usize,
    port: usize,
    schema: SchemaRef,
    timed: bool,
}

/// Builds the plan, adding every problem to `d`. Returns `None` if there
/// were errors (in `d` before or found now).
pub(crate) fn build(config: &Config, d: &mut Diagnostics) -> Option<Plan> {
    let order = topological_order(config);
    let mut streams: HashMap<String, StreamInfo> = HashMap::new();
    let mut nodes: Vec<PlanNode> = Vec::new();
    for ci in order {
        let c = &config.components[ci];
        if matches!(c.spec, Spec::Invalid) {
            continue;
        }
        // An input that failed earlier was reported there; skip quietly.
        let Some(inputs) = c
            .inputs
            .iter()
            .map(|i| streams.get(&i.value).cloned())
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let index = nodes.len();
        let checkpoints_off = config.node.checkpoint_interval_ms.is_none();
        let mut cx = NodeBuilder {
            d,
            c,
            inputs: &inputs,
            checkpoints_off,
            node_name: &config.node.name,
        };
        let Some((op, outputs, exchanges)) = cx.build() else {
            continue;
        };
        for (port, (name, schema, timed)) in outputs.iter().enumerate() {
            streams.insert(
                name.clone(),
                StreamInfo {
                    node: index,
                    port,
                    schema: schema.clone(),
                    timed: *timed,
                },
            );
        }
        let plan_inputs: Vec<PlanInput> = inputs
            .iter()
            .zip(exchanges)
            .map(|(s, exchange)| PlanInput {
                from: s.node,
                from_port: s.port,
                exchange,
            })
            .collect();
        for (port, s) in inputs.iter().enumerate() {
            nodes[s.node].outputs[s.port].consumers.push((index, port));
        }
        let kind = match c.section {
            Section::Source => NodeKind::Source,
            Section::Transform => NodeKind::Transform,
            Section::Sink => NodeKind::Sink,
        };
        nodes.push(PlanNode {
            id: c.id.value.clone(),
            type_name: c.type_name.value.clone(),
            kind,
            inputs: plan_inputs,
            outputs: outputs
                .into_iter()
                .map(|(name, schema, _)| PlanOutput {
                    name,
                    schema,
                    consumers: Vec::new(),
                })
                .collect(),
            op,
        });
    }
    if d.has_errors() {
        return None;
    }
    Some(Plan {
        node: config.node.clone(),
        nodes,
    })
}

/// Components ordered so that every input comes before its consumers.
/// Components on a cycle (already reported) are left out.
fn topological_order(config: &Config) -> Vec<usize> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, c) in config.components.iter().enumerate() {
        producer.entry(c.id.value.as_str()).or_insert(i);
        if let Some(late) = c.late_output() {
            producer.entry(late.value.as_str()).or_insert(i);
        }
    }
    let n = config.components.len();
    let mut pending: Vec<usize> = vec![0; n];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, c) in config.components.iter().enumerate() {
        for input in &c.inputs {
            if let Some(&p) = producer.get(input.value.as_str()) {
                pending[i] += 1;
                consumers[p].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).rev().filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &c in consumers[i].iter().rev() {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.push(c);
            }
        }
    }
    order
}

type Outputs = Vec<(String, SchemaRef, bool)>;

struct NodeBuilder<'a> {
    d: &'a mut Diagnostics,
    c: &'a Component,
    inputs: &'a [StreamInfo],
    checkpoints_off: bool,
    node_name: &'a str,
}

impl NodeBuilder<'_> {
    fn ctx(&self, field: &str) -> Context {
        Context {
            component: Some(self.c.qualified_id()),
            field: Some(field.to_string()),
        }
    }

    fn error(&mut self, span: Range<usize>, field: &str, message: impl Into<String>) {
        let ctx = self.ctx(field);
        self.d.error(span, &ctx, message);
    }

    fn build(&mut self) -> Option<(OpSpec, Outputs, Vec<Option<KeySpec>>)> {
        let id = self.c.id.value.clone();
        let forward = vec![None; self.inputs.len()];
        match &self.c.spec {
            Spec::Generator(g) => {
                let schema = crate::io::generator::schema(g.spec.kind);
                let plan = GeneratorPlan {
                    spec: g.spec.clone(),
                    rate: g.rate,
                    rate_steps: g.rate_steps.clone(),
                    count: g.count,
                    max_out_of_orderness_ms: g.event_time.max_out_of_orderness_ms,
                    max_drift_ms: g.max_drift_ms,
                };
                Some((OpSpec::Generator(plan), vec![(id, schema, true)], forward))
            }
            Spec::File(f) => {
                let plan = LineSourcePlan {
                    rate: f.rate,
                    ..line_source(
                        Some(f.path.value.clone()),
                        f.follow,
                        f.format,
                        &f.schema,
                        &f.event_time,
                    )
                };
                let out = vec![(id, plan.schema.clone(), plan.event_time.is_some())];
                Some((OpSpec::FileSource(plan), out, forward))
            }
            Spec::Stdin(s) => {
                let plan = line_source(None, false, s.format, &s.schema, &s.event_time);
                let out = vec![(id, plan.schema.clone(), plan.event_time.is_some())];
                Some((OpSpec::Stdin(plan), out, forward))
            }
            Spec::NetSource(s) => {
                let lines = line_source(None, false, s.format, &s.schema, &s.event_time);
                let out = vec![(id, lines.schema.clone(), lines.event_time.is_some())];
                let plan = NetSourcePlan {
                    lines,
                    settings: s.settings.clone(),
                };
                Some((OpSpec::NetSource(Arc::new(plan)), out, forward))
            }
            Spec::Filter { condition } => {
                let (schema, timed) = self.union_input()?;
                let compiled = self.compile(condition, "condition", &schema)?;
                if compiled.data_type() != DataType::Bool {
                    self.error(
                        condition.span.clone(),
                        "condition",
                        format!(
                            "must be a boolean expression, but it is {}",
                            compiled.data_type()
                        ),
                    );
                    return None;
                }
                Some((
                    OpSpec::Filter(Arc::new(compiled)),
                    vec![(id, schema, timed)],
                    forward,
                ))
            }
            Spec::Map {
                fields,
                cost_per_record_ns,
            } => {
                let (schema, timed) = self.union_input()?;
                let cost = *cost_per_record_ns;
                self.map(fields, &schema).map(|(cols, out)| {
                    (
                        OpSpec::Map(Arc::new(cols), cost),
                        vec![(id, out, timed)],
                        forward,
                    )
                })
            }
            Spec::Select { fields } | Spec::Drop { fields } => {
                let (schema, timed) = self.union_input()?;
                let keep = matches!(self.c.spec, Spec::Select { .. });
                let (indices, out) = self.project(fields, &schema, keep)?;
                Some((
                    OpSpec::Project(Arc::new(indices)),
                    vec![(id, out, timed)],
                    forward,
                ))
            }
            Spec::Window(w) => self.window(w, id),
            Spec::Join(j) => self.join(j, id),
            Spec::Stdout { format } => {
                self.sink_inputs(*format)?;
                Some((OpSpec::Stdout { format: *format }, Vec::new(), forward))
            }
            Spec::FileSink {
                path,
                format,
                exactly_once,
            } => {
                self.sink_inputs(*format)?;
                if *exactly_once && self.checkpoints_off {
                    let span = self.c.id.span.clone();
                    self.error(
                        span,
                        "delivery",
                        "exactly_once needs checkpoints, which are off (`[checkpoint] enabled = false`)",
                    );
                    return None;
                }
                Some((
                    OpSpec::FileSink {
                        path: path.value.clone(),
                        format: *format,
                        exactly_once: *exactly_once,
                    },
                    Vec::new(),
                    forward,
                ))
            }
            Spec::Blackhole => Some((OpSpec::Blackhole, Vec::new(), forward)),
            Spec::Mqtt(m) => {
                let plan = mqtt_source(m, self.node_name, &id);
                let out = vec![(id, plan.schema.clone(), plan.event_time.is_some())];
                Some((OpSpec::MqttSource(Arc::new(plan)), out, forward))
            }
            Spec::MqttSink(m) => self
                .mqtt_sink(m, &id)
                .map(|plan| (OpSpec::MqttSink(Arc::new(plan)), Vec::new(), forward)),
            Spec::NetSink(s) => Some((OpSpec::NetSink(Arc::new(s.clone())), Vec::new(), forward)),
            Spec::Invalid => None,
        }
    }

    /// Resolves the `{field}` parts of the topic against the input.
    fn mqtt_sink(
        &mut self,
        m: &crate::config::MqttSinkConfig,
        id: &str,
    ) -> Option<crate::io::MqttSinkPlan> {
        use crate::io::TopicPart;
        let mut topic = m.topic.value.clone();
        if topic.iter().any(|p| matches!(p, TopicPart::Field { .. })) {
            let (schema, _) = self.union_input()?;
            let mut ok = true;
            for part in &mut topic {
                if let TopicPart::Field { index, name } = part {
                    match schema.index_of(name) {
                        Some(i) => *index = i,
                        None => {
                            let msg = unknown_field(name, &schema);
                            self.error(m.topic.span.clone(), "topic", msg);
                            ok = false;
                        }
                    }
                }
            }
            if !ok {
                return None;
            }
        }
        Some(crate::io::MqttSinkPlan {
            conn: m.conn.resolve(self.node_name, id),
            topic,
            qos: m.qos,
            retain: m.retain,
        })
    }

    /// The schema shared by all inputs, which must agree.
    fn union_input(&mut self) -> Option<(SchemaRef, bool)> {
        let first = self.inputs.first()?;
        for (k, other) in self.inputs.iter().enumerate().skip(1) {
            if other.schema != first.schema {
                let span = self.c.inputs[k].span.clone();
                let msg = format!(
                    "inputs `{}` and `{}` have different fields ({} / {}); records of one stream must share their fields",
                    self.c.inputs[0].value,
                    self.c.inputs[k].value,
                    first.schema.describe(),
                    other.schema.describe()
                );
                self.error(span, "inputs", msg);
                return None;
            }
        }
        Some((first.schema.clone(), self.inputs.iter().all(|s| s.timed)))
    }

    fn sink_inputs(&mut self, format: Format) -> Option<()> {
        // JSON lines name their fields, so a JSON sink takes streams of any shape.
        if format == Format::Csv {
            self.union_input()?;
        }
        Some(())
    }

    fn compile(
        &mut self,
        text: &Sp<String>,
        field: &str,
        schema: &Schema,
    ) -> Option<expr::Compiled> {
        match expr::compile(&text.value, schema) {
            Ok(c) => Some(c),
            Err(e) => {
                self.expr_error(text, field, e);
                None
            }
        }
    }

    fn expr_error(&mut self, text: &Sp<String>, field: &str, e: ExprError) {
        let at = position_in_string(&self.d.text, text, e.offset);
        self.error(at..at + 1, field, e.message);
    }

    fn map(
        &mut self,
        fields: &[(Sp<String>, Sp<String>)],
        schema: &Schema,
    ) -> Option<(Vec<MapColumn>, SchemaRef)> {
        let mut columns: Vec<MapColumn> = (0..schema.len()).map(MapColumn::Input).collect();
        let mut out: Vec<Field> = schema.fields().to_vec();
        let mut ok = true;
        for (name, text) in fields {
            let Some(compiled) = self.compile(text, &format!("fields.{}", name.value), schema)
            else {
                ok = false;
                continue;
            };
            let field = Field::new(name.value.clone(), compiled.data_type());
            match schema.index_of(&name.value) {
                Some(i) => {
                    out[i] = field;
                    columns[i] = MapColumn::Expr(compiled);
                }
                None => {
                    out.push(field);
                    columns.push(MapColumn::Expr(compiled));
                }
            }
        }
        ok.then(|| (columns, Arc::new(Schema::new(out))))
    }

    fn project(
        &mut self,
        fields: &[Sp<String>],
        schema: &Schema,
        keep: bool,
    ) -> Option<(Vec<usize>, SchemaRef)> {
        let mut named = Vec::new();
        for f in fields {
            match schema.index_of(&f.value) {
                Some(i) if named.contains(&i) => self.error(
                    f.span.clone(),
                    "fields",
                    format!("`{}` is listed twice", f.value),
                ),
                Some(i) => named.push(i),
                None => {
                    let msg = unknown_field(&f.value, schema);
                    self.error(f.span.clone(), "fields", msg);
                }
            }
        }
        if named.len() != fields.len() {
            return None;
        }
        let indices: Vec<usize> = if keep {
            named
        } else {
            (0..schema.len()).filter(|i| !named.contains(i)).collect()
        };
        if indices.is_empty() {
            let span = fields
                .first()
                .map_or(self.c.id.span.clone(), |f| f.span.clone());
            self.error(span, "fields", "no field would be left");
            return None;
        }
        let out = Schema::new(
            indices
                .iter()
                .map(|&i| schema.fields()[i].clone())
                .collect(),
        );
        Some((indices, Arc::new(out)))
    }

    fn key(&mut self, names: &[Sp<String>], schema: &Schema, field: &str) -> Option<KeySpec> {
        let mut cols = Vec::new();
        let mut types = Vec::new();
        for n in names {
            match schema.field(&n.value) {
                Some((i, f)) => {
                    cols.push(i);
                    types.push(f.ty);
                }
                None => {
                    let msg = unknown_field(&n.value, schema);
                    self.error(n.span.clone(), field, msg);
                }
            }
        }
        (cols.len() == names.len()).then(|| KeySpec::new(cols, types))
    }

    fn require_timed(&mut self, timed: bool) -> Option<()> {
        if timed {
            return Some(());
        }
        let untimed: Vec<&str> = self
            .inputs
            .iter()
            .zip(&self.c.inputs)
            .filter(|(s, _)| !s.timed)
            .map(|(_, n)| n.value.as_str())
            .collect();
        let msg = format!(
            "needs event time, but `{}` carries none; set `event_time = \"FIELD\"` on the source it comes from",
            untimed.join("`, `")
        );
        let span = self.c.inputs_span.clone();
        self.error(span, "inputs", msg);
        None
    }

    fn window(
        &mut self,
        w: &crate::config::WindowConfig,
        id: String,
    ) -> Option<(OpSpec, Outputs, Vec<Option<KeySpec>>)> {
        let (schema, timed) = self.union_input()?;
        let timed_ok = self.require_timed(timed);
        let key = self.key(&w.key, &schema, "key");
        let mut aggregates = Vec::new();
        let mut out_fields: Vec<Field> = Vec::new();
        if let Some(k) = &key {
            for n in &w.key {
                let ty = schema
                    .field(&n.value)
                    .map(|(_, f)| f.ty)
                    .unwrap_or(DataType::Int);
                out_fields.push(Field::new(n.value.clone(), ty));
            }
            debug_assert_eq!(k.types().len(), out_fields.len());
        }
        let mut ok = true;
        if w.aggregates.len() > crate::kernel::agg::MAX_NUM_AGGS {
            let span = w.aggregates[crate::kernel::agg::MAX_NUM_AGGS]
                .0
                .span
                .clone();
            let msg = format!(
                "a window takes at most {} aggregates",
                crate::kernel::agg::MAX_NUM_AGGS
            );
            self.error(span, "aggregates", msg);
            ok = false;
        }
        for (name, text) in &w.aggregates {
            let reserved = ["window_start", "window_end"].contains(&name.value.as_str());
            if reserved || out_fields.iter().any(|f| f.name == name.value) {
                let why = if reserved {
                    "is a field every window output has"
                } else {
                    "is already an output field"
                };
                self.error(
                    name.span.clone(),
                    "aggregates",
                    format!("`{}` {why}; choose another name", name.value),
                );
                ok = false;
                continue;
            }
            match expr::compile_aggregate(&text.value, &schema) {
                Ok(call) => {
                    out_fields.push(Field::new(name.value.clone(), call.output));
                    aggregates.push(call);
                }
                Err(e) => {
                    self.expr_error(text, &format!("aggregates.{}", name.value), e);
                    ok = false;
                }
            }
        }
        out_fields.push(Field::new("window_start", DataType::Int));
        out_fields.push(Field::new("window_end", DataType::Int));
        let (key, _) = (key?, timed_ok?);
        if !ok {
            return None;
        }
        debug_assert!(
            aggregates
                .iter()
                .all(|a| a.func == AggFunc::CountRows || a.arg.is_some())
        );
        let output = Arc::new(Schema::new(out_fields));
        let mut outputs = vec![(id, output.clone(), true)];
        if let Some(late) = &w.late_output {
            outputs.push((late.value.clone(), schema.clone(), true));
        }
        let plan = WindowPlan {
            key: key.clone(),
            kind: w.kind,
            allowed_lateness_ms: w.allowed_lateness_ms,
            aggregates,
            output,
            has_late_output: w.late_output.is_some(),
        };
        let exchanges = vec![Some(key); self.inputs.len()];
        Some((OpSpec::Window(Arc::new(plan)), outputs, exchanges))
    }

    fn join(
        &mut self,
        j: &crate::config::JoinConfig,
        id: String,
    ) -> Option<(OpSpec, Outputs, Vec<Option<KeySpec>>)> {
        let [left, right] = self.inputs else {
            return None;
        };
        let (left, right) = (left.clone(), right.clone());
        let timed = self.require_timed(left.timed && right.timed);
        let lk = self.key(
            &j.left_on,
            &left.schema,
            if j.left_on == j.right_on {
                "on"
            } else {
                "left_on"
            },
        );
        let rk = self.key(
            &j.right_on,
            &right.schema,
            if j.left_on == j.right_on {
                "on"
            } else {
                "right_on"
            },
        );
        let (lk, rk, _) = (lk?, rk?, timed?);
        for (k, (lt, rt)) in lk.types().iter().zip(rk.types()).enumerate() {
            if lt != rt {
                let span = j.right_on[k].span.clone();
                let msg = format!(
                    "key `{}` is {lt} on the left but `{}` is {rt} on the right",
                    j.left_on[k].value, j.right_on[k].value
                );
                self.error(span, "on", msg);
                return None;
            }
        }
        let (lname, rname) = (&self.c.inputs[0].value, &self.c.inputs[1].value);
        // A right key with the left key's name and position holds the same
        // value: keep one copy.
        let shared_key = |ri: usize| -> bool {
            let name = &right.schema.fields()[ri].name;
            j.right_on
                .iter()
                .zip(&j.left_on)
                .any(|(r, l)| &r.value == name && &l.value == name)
        };
        let left_names: Vec<&str> = left
            .schema
            .fields()
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        let right_kept: Vec<usize> = (0..right.schema.len())
            .filter(|&i| !shared_key(i))
            .collect();
        let clash = |name: &str| -> bool {
            left_names.contains(&name)
                && right_kept
                    .iter()
                    .any(|&i| right.schema.fields()[i].name == name)
        };
        let mut columns = Vec::new();
        let mut fields = Vec::new();
        for (i, f) in left.schema.fields().iter().enumerate() {
            let name = if clash(&f.name) {
                format!("{lname}_{}", f.name)
            } else {
                f.name.clone()
            };
            columns.push((0, i));
            fields.push(Field::new(name, f.ty));
        }
        for &i in &right_kept {
            let f = &right.schema.fields()[i];
            let name = if clash(&f.name) {
                format!("{rname}_{}", f.name)
            } else {
                f.name.clone()
            };
            columns.push((1, i));
            fields.push(Field::new(name, f.ty));
        }
        if let JoinMode::Tumbling { .. } = j.mode {
            fields.push(Field::new("window_start", DataType::Int));
            fields.push(Field::new("window_end", DataType::Int));
        }
        for (a, f) in fields.iter().enumerate() {
            if fields[..a].iter().any(|g| g.name == f.name) {
                let span = self.c.inputs_span.clone();
                self.error(span, "inputs", format!("the joined record would have two fields named `{}`; rename one with a map first", f.name));
                return None;
            }
        }
        let output = Arc::new(Schema::new(fields));
        let plan = JoinPlan {
            left_key: lk.clone(),
            right_key: rk.clone(),
            mode: j.mode,
            columns,
            output: output.clone(),
            left_width: left.schema.len(),
            right_width: right.schema.len(),
        };
        Some((
            OpSpec::Join(Arc::new(plan)),
            vec![(id, output, true)],
            vec![Some(lk), Some(rk)],
        ))
    }
}

fn line_source(
    path: Option<std::path::PathBuf>,
    follow: bool,
    format: Format,
    decl: &SchemaDecl,
    et: &EventTime,
) -> LineSourcePlan {
    let schema = Arc::new(Schema::new(
        decl.iter()
            .map(|(n, t)| Field::new(n.value.clone(), *t))
            .collect(),
    ));
    let event_time = et.field.as_ref().and_then(|f| schema.index_of(&f.value));
    LineSourcePlan {
        path,
        follow,
        format,
        schema,
        event_time,
        max_out_of_orderness_ms: et.max_out_of_orderness_ms,
        rate: None,
    }
}

fn mqtt_source(
    m: &crate::config::MqttSourceConfig,
    node_name: &str,
    id: &str,
) -> crate::io::MqttSourcePlan {
    let payload = line_source(None, false, m.format, &m.schema, &m.event_time);
    let schema = match &m.topic_field {
        Some(f) => {
            let mut fields = payload.schema.fields().to_vec();
            fields.push(Field::new(f.value.clone(), DataType::Str));
            Arc::new(Schema::new(fields))
        }
        None => payload.schema.clone(),
    };
    crate::io::MqttSourcePlan {
        conn: m.conn.resolve(node_name, id),
        topics: m.topics.clone(),
        qos: m.qos,
        payload_schema: payload.schema,
        schema,
        topic_field: m.topic_field.as_ref().map(|f| f.value.clone()),
        format: m.format,
        event_time: payload.event_time,
        max_out_of_orderness_ms: payload.max_out_of_orderness_ms,
    }
}

fn unknown_field(name: &str, schema: &Schema) -> String {
    let hint = crate::config::suggest_name(name, schema.fields().iter().map(|f| f.name.as_str()));
    format!(
        "unknown field `{name}`{hint}; fields here: {}",
        schema.describe()
    )
}

/// The byte offset in the file of byte `offset` of the string value `s`.
/// Exact when the string has no escapes; otherwise the string's start.
fn position_in_string(file: &str, s: &Sp<String>, offset: usize) -> usize {
    let raw = file.get(s.span.clone()).unwrap_or("");
    let delimiter = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
        3
    } else {
        1
    };
    let mut start = s.span.start + delimiter;
    if delimiter == 3 && file[start..].starts_with('\n') {
        start += 1;
    } else if delimiter == 3 && file[start..].starts_with("\r\n") {
        start += 2;
    }
    match file.get(start..start + s.value.len()) {
        Some(inner) if inner == s.value => start + offset.min(s.value.len()),
        _ => s.span.start,
    }
}
