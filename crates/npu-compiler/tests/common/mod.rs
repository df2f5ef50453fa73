//! A tiny builder of torch_ir JSON for hand-made test graphs.
#![allow(dead_code)]

use npu_compiler::{compile, CompileOptions, Program};
use npu_ir::{DType, Graph};
use serde_json::{json, Value as Json};
use std::collections::HashMap;

#[derive(Default)]
pub struct Ir {
    inputs: Vec<Json>,
    outputs: Vec<Json>,
    weights: Vec<Json>,
    mapping: serde_json::Map<String, Json>,
    nodes: Vec<Json>,
    constants: serde_json::Map<String, Json>,
    /// name -> (meta json without producer, producer (node, idx) if any)
    meta: HashMap<String, (Json, Option<(String, usize)>)>,
}

fn tmeta(name: &str, shape: &[usize], dtype: &str) -> Json {
    json!({"name": name, "shape": shape, "dtype": dtype})
}

impl Ir {
    pub fn new() -> Ir {
        Ir::default()
    }

    pub fn input(&mut self, name: &str, shape: &[usize], dtype: &str) -> String {
        let m = tmeta(name, shape, dtype);
        self.inputs.push(m.clone());
        self.meta.insert(name.into(), (m, Some((name.into(), 0))));
        name.into()
    }

    /// Registers a weight under its state-dict key; returns its placeholder name.
    pub fn weight(&mut self, key: &str, shape: &[usize], dtype: &str) -> String {
        let ph = format!("p_{}", key.replace('.', "_"));
        self.weights.push(tmeta(key, shape, dtype));
        self.mapping.insert(ph.clone(), json!(key));
        self.meta
            .insert(ph.clone(), (tmeta(&ph, shape, dtype), None));
        ph
    }

    pub fn constant(&mut self, key: &str, shape: &[usize], dtype: &str, data: Json) -> String {
        let ph = format!("c_{key}");
        self.weights.push(tmeta(key, shape, dtype));
        self.mapping.insert(ph.clone(), json!(key));
        self.constants
            .insert(key.into(), json!({"data": data, "dtype": dtype}));
        self.meta
            .insert(ph.clone(), (tmeta(&ph, shape, dtype), None));
        ph
    }

    fn input_meta(&self, name: &str) -> Json {
        let (m, prod) = self
            .meta
            .get(name)
            .unwrap_or_else(|| panic!("unknown tensor {name}"));
        let mut m = m.clone();
        if let Some((p, i)) = prod {
            m["producer_node"] = json!(p);
            m["producer_output_idx"] = json!(i);
        }
        m
    }

    /// A single-output node named `name`.
    pub fn op(
        &mut self,
        name: &str,
        op_type: &str,
        inputs: &[&str],
        shape: &[usize],
        dtype: &str,
        attrs: Json,
    ) -> String {
        self.op_multi(name, op_type, inputs, &[(shape, dtype)], attrs)
            .remove(0)
    }

    pub fn op_multi(
        &mut self,
        name: &str,
        op_type: &str,
        inputs: &[&str],
        outs: &[(&[usize], &str)],
        attrs: Json,
    ) -> Vec<String> {
        let ins: Vec<Json> = inputs.iter().map(|i| self.input_meta(i)).collect();
        let mut names = Vec::new();
        let mut metas = Vec::new();
        for (i, (shape, dt)) in outs.iter().enumerate() {
            let n = if outs.len() == 1 {
                name.to_string()
            } else {
                format!("{name}_{i}")
            };
            let m = tmeta(&n, shape, dt);
            self.meta
                .insert(n.clone(), (m.clone(), Some((name.into(), i))));
            metas.push(m);
            names.push(n);
        }
        self.nodes.push(json!({"name": name, "op_type": op_type, "inputs": ins, "outputs": metas, "attrs": attrs}));
        names
    }

    pub fn output(&mut self, name: &str) {
        let (m, _) = &self.meta[name];
        self.outputs.push(m.clone());
    }

    pub fn json(&self) -> String {
        let mut v = json!({
            "model_name": "test", "pytorch_version": "2.11.0",
            "graph_inputs": self.inputs, "graph_outputs": self.outputs, "weights": self.weights,
            "weight_name_mapping": self.mapping, "nodes": self.nodes,
        });
        if !self.constants.is_empty() {
            v["constants"] = Json::Object(self.constants.clone());
        }
        v.to_string()
    }

    pub fn graph(&self) -> Graph {
        npu_ir::parse_str(&self.json()).expect("test IR parses")
    }

    pub fn compile(&self, target: &'static npu_compiler::Target, dtype: DType) -> Program {
        compile(
            self.graph(),
            &CompileOptions {
                target,
                dtype: Some(dtype),
            },
        )
        .expect("compiles")
        .0
    }
}

pub fn kinds(p: &Program) -> Vec<&'static str> {
    p.steps.iter().map(|s| s.kernel.kind()).collect()
}
