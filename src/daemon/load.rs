//! Loading a pipeline file into a plan, with every diagnostic.

use std::path::Path;

use crate::config::{self, Context, Diagnostics};
use crate::plan::{self, Plan};

/// Reads, checks and plans `path`. On error, the diagnostics hold every
/// problem found.
pub(crate) fn load(path: &Path) -> Result<(Plan, Diagnostics), Diagnostics> {
    load_with_text(path).map(|(_, plan, d)| (plan, d))
}

/// [`load`], also returning the file's text.
pub(crate) fn load_with_text(path: &Path) -> Result<(String, Plan, Diagnostics), Diagnostics> {
    let name = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            let mut d = Diagnostics::new(&name, "");
            d.error(
                0..0,
                &Context::default(),
                format!("cannot read the pipeline file: {e}"),
            );
            return Err(d);
        }
    };
    load_str(&name, &text).map(|(plan, d)| (text, plan, d))
}

pub(crate) fn load_str(name: &str, text: &str) -> Result<(Plan, Diagnostics), Diagnostics> {
    let (config, mut d) = config::parse(name, text);
    match plan::build(&config, &mut d) {
        Some(plan) if !d.has_errors() => Ok((plan, d)),
        _ => Err(d),
    }
}
