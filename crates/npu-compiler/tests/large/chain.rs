//! Generators of large chain graphs as IR JSON text (shared by the `large_graph` test and
//! the `large_graph` example that times them in release mode).

use std::fmt::Write;

/// Which op each link of the chain is.
#[derive(Clone, Copy, Debug)]
pub enum Link {
    /// `relu`: one fusable elementwise chain.
    Relu,
    /// `softmax` over the last dim: one kernel and one buffer per node, nothing fuses.
    Softmax,
}

/// IR JSON of `n` chained ops over a [4, 8] f32 input.
pub fn chain(n: usize, link: Link) -> String {
    let (op, attrs) = match link {
        Link::Relu => ("aten.relu.default", "{}"),
        Link::Softmax => (
            "aten._softmax.default",
            r#"{"dim": -1, "half_to_float": false}"#,
        ),
    };
    let meta = |name: &str, producer: &str| {
        format!(
            r#"{{"name": "{name}", "shape": [4, 8], "dtype": "float32", "producer_node": "{producer}", "producer_output_idx": 0}}"#
        )
    };
    let mut s = String::with_capacity(n * 300);
    s.push_str(r#"{"model_name": "chain", "graph_inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32"}], "#);
    let _ = write!(
        s,
        r#""graph_outputs": [{{"name": "n{}", "shape": [4, 8], "dtype": "float32"}}], "weights": [], "weight_name_mapping": {{}}, "nodes": ["#,
        n - 1
    );
    for i in 0..n {
        let prev = if i == 0 {
            "x".to_string()
        } else {
            format!("n{}", i - 1)
        };
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(
            s,
            r#"{{"name": "n{i}", "op_type": "{op}", "inputs": [{}], "outputs": [{}], "attrs": {attrs}}}"#,
            meta(&prev, &prev),
            meta(&format!("n{i}"), &format!("n{i}"))
        );
    }
    s.push_str("]}");
    s
}
