//! Reading JSON the store wrote, without a recursion limit that a deep (but in-bounds)
//! input would trip, and without unbounded recursion either.

use serde::Deserialize;
use serde_json::Value;
use toolgate::engine::json::raw_depth;
use toolgate::engine::policy::MAX_INPUT_DEPTH_CEILING;

/// Parses stored JSON text. Inputs were bounded by the gate (R36) before they were held;
/// the depth is measured again here, without recursing, before anything recursive runs.
pub(crate) fn parse_input(text: &str) -> Result<Value, String> {
    if raw_depth(text) > MAX_INPUT_DEPTH_CEILING {
        return Err(format!(
            "the stored JSON nests deeper than {MAX_INPUT_DEPTH_CEILING} levels"
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).map_err(|e| format!("malformed JSON: {e}"))?;
    de.end().map_err(|e| format!("malformed JSON: {e}"))?;
    Ok(value)
}
