//! Chat templates: the Jinja template of `tokenizer_config.json` rendered with `minijinja`
//! the way transformers' `apply_chat_template` renders it with jinja2: `trim_blocks` and
//! `lstrip_blocks`, loop controls, Python string methods (`.strip()`, `.startswith()`, ...),
//! a `tojson` filter that writes what Python's `json.dumps` writes (no HTML escaping), and
//! the globals `raise_exception` and `strftime_now`. The variables are `messages`,
//! `add_generation_prompt`, `tools` (none) and the special tokens (`bos_token`, ...).

use crate::error::{Result, TextError};
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};
use serde::Serialize;
use std::collections::BTreeMap;

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
}

const NAME: &str = "chat_template";

impl ChatTemplate {
    /// Compiles `source`; a syntax error names its line.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|source| TextError::Template {
                what: "syntax cannot be configured".into(),
                source,
            })?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| crate::strftime::now(&fmt));
        env.add_template_owned(NAME, source.to_string())
            .map_err(|source| TextError::Template {
                what: "does not parse".into(),
                source,
            })?;
        Ok(ChatTemplate { env })
    }

    /// Renders `messages` (anything serializable as a list of `{role, content, ...}`).
    pub fn render<M: Serialize>(
        &self,
        messages: &M,
        add_generation_prompt: bool,
        special_tokens: &BTreeMap<String, String>,
    ) -> Result<String> {
        self.render_with(
            messages,
            add_generation_prompt,
            special_tokens,
            Value::from(()),
        )
    }

    /// As [`ChatTemplate::render`], with `tools` (a list of JSON schemas, or none).
    pub fn render_with<M: Serialize>(
        &self,
        messages: &M,
        add_generation_prompt: bool,
        special_tokens: &BTreeMap<String, String>,
        tools: Value,
    ) -> Result<String> {
        let mut ctx: BTreeMap<String, Value> = special_tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        ctx.insert(
            "messages".into(),
            Value::from(minijinja::value::Serde(messages)),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        ctx.insert("tools".into(), tools);
        ctx.insert("documents".into(), Value::from(()));
        let t = self
            .env
            .get_template(NAME)
            .map_err(|source| TextError::Template {
                what: "is missing".into(),
                source,
            })?;
        t.render(Value::from(ctx))
            .map_err(|source| TextError::Template {
                what: "cannot be rendered".into(),
                source,
            })
    }
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`.
fn tojson(v: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(i) if i.is_none() => None,
        Some(i) => match i.as_i64() {
            Some(n) => Some(" ".repeat(n.max(0) as usize)),
            None => Some(i.to_string()),
        },
    };
    let (item, key) = match separators {
        Some(s) if !s.is_none() => {
            let a = s.get_item(&Value::from(0))?;
            let b = s.get_item(&Value::from(1))?;
            (a.to_string(), b.to_string())
        }
        // Python's defaults: ", " on one line, "," when indenting.
        _ => (
            if indent.is_some() { "," } else { ", " }.to_string(),
            ": ".to_string(),
        ),
    };
    let w = JsonWriter {
        ascii: ensure_ascii.unwrap_or(false),
        indent,
        item,
        key,
        sort: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    w.value(&v, 0, &mut out)?;
    Ok(Value::from(out))
}

struct JsonWriter {
    ascii: bool,
    indent: Option<String>,
    item: String,
    key: String,
    sort: bool,
}

impl JsonWriter {
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(ind) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ascii && !c.is_ascii()) => {
                    let mut buf = [0u16; 2];
                    for u in c.encode_utf16(&mut buf) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    fn value(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), Error> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if let Some(i) = v.as_i64() {
                    out.push_str(&i.to_string());
                } else {
                    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                    // Python writes floats with a fraction or exponent: 1.0, not 1.
                    let s = if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
                        format!("{f:.1}")
                    } else if f.is_nan() {
                        "NaN".into()
                    } else if f.is_infinite() {
                        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
                    } else {
                        format!("{f}")
                    };
                    out.push_str(&s);
                }
            }
            ValueKind::String => self.string(v.as_str().unwrap_or_default(), out),
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort {
                    keys.sort();
                }
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item);
                    }
                    self.newline(depth + 1, out);
                    match k.as_str() {
                        Some(s) => self.string(s, out),
                        None => self.string(&k.to_string(), out),
                    }
                    out.push_str(&self.key);
                    self.value(&v.get_item(k)?, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push('}');
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item);
                    }
                    self.newline(depth + 1, out);
                    self.value(x, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push(']');
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson cannot write a {} value", v.kind()),
                ))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, messages: &[Message], gen: bool) -> String {
        ChatTemplate::new(src)
            .unwrap()
            .render(&messages, gen, &BTreeMap::new())
            .unwrap()
    }

    #[test]
    fn blocks_are_trimmed_like_transformers_renders_them() {
        let src = "{% for m in messages %}\n  {% if m.role == 'user' %}\n<{{ m.content.strip() }}>\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}A:{% endif %}\n";
        let got = render(
            src,
            &[Message::new("user", " hi "), Message::new("x", "no")],
            true,
        );
        assert_eq!(got, "<hi>\nA:");
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        let t = ChatTemplate::new(
            "{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}|{{ 'é<>' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}",
        )
        .unwrap();
        let m = serde_json::json!([{"role": "user", "content": "a\"b\n"}]);
        let got = t.render(&m, false, &BTreeMap::new()).unwrap();
        assert_eq!(
            got,
            "{\"content\": \"a\\\"b\\n\", \"role\": \"user\"}|{\n  \"content\": \"a\\\"b\\n\",\n  \"role\": \"user\"\n}|\"é<>\"|\"\\u00e9\""
        );
    }

    #[test]
    fn raise_exception_and_bad_syntax_are_errors() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}").unwrap();
        let e = t.render(&Vec::<Message>::new(), false, &BTreeMap::new());
        assert!(format!("{:?}", e.unwrap_err()).contains("no system role"));
        assert!(ChatTemplate::new("{% if %}").is_err());
    }

    #[test]
    fn special_tokens_and_loop_controls_are_there() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}",
        )
        .unwrap();
        let special = BTreeMap::from([("bos_token".to_string(), "<s>".to_string())]);
        let m = [Message::new("user", "a"), Message::new("user", "b")];
        assert_eq!(t.render(&m, false, &special).unwrap(), "<s>a");
    }
}
