//! The context-window guard of models that declare their window
//! (`maxModelLen`): an output limit the window cannot hold is clamped, and
//! a `context-bounded` model refuses, before the engine sees it, a request
//! whose estimated prompt and output cannot fit.

use std::ops::Range;

use serde_json::json;

use super::metering::prompt_tokens;
use super::settings::WindowSettings;
use crate::errors::ApiError;
use crate::extract::JsonView;
use crate::registry::ModelRoute;

/// An output limit lowered to what the window holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Clamp {
    /// Where the limit is written in the body.
    pub(super) span: Range<usize>,
    /// What the client asked for.
    pub(super) from: u64,
    /// What the engine gets.
    pub(super) to: u64,
}

impl Clamp {
    /// The `X-FlexInfer-MaxTokens-Clamped` header value (`8192->7680`).
    pub(super) fn header(&self) -> String {
        format!("{}->{}", self.from, self.to)
    }
}

/// Checks a request against its model's window: the clamp to apply, or
/// the 413 of a request that cannot fit. Models without a window pass.
pub(super) fn guard(
    route: &ModelRoute,
    view: &JsonView<'_>,
    settings: &WindowSettings,
) -> Result<Option<Clamp>, ApiError> {
    let Some(window) = route.context_window else {
        return Ok(None);
    };
    let limit = view.output_limit.as_ref();
    let cap = window.saturating_sub(settings.prompt_reserve).max(1);
    let clamp = limit
        .filter(|l| settings.clamp && l.value > cap)
        .map(|l| Clamp {
            span: l.span.clone(),
            from: l.value,
            to: cap,
        });
    if settings.admission && route.context_admission {
        let output = clamp
            .as_ref()
            .map(|c| c.to)
            .or(limit.map(|l| l.value))
            .unwrap_or(settings.default_max_tokens);
        admit(&route.name, window, prompt_tokens(view), output, settings)?;
    }
    Ok(clamp)
}

/// Refuses `prompt + output` tokens beyond the window less the margin.
fn admit(
    model: &str,
    window: u64,
    prompt: u64,
    output: u64,
    settings: &WindowSettings,
) -> Result<(), ApiError> {
    let budget = window * (100 - settings.margin_percent.min(50)) / 100;
    let submitted = prompt + output;
    if submitted <= budget {
        return Ok(());
    }
    let message = format!(
        "prompt + max_tokens ({prompt} + {output} = {submitted}) exceeds \"{model}\" context budget {budget} (window {window}, safety margin applied)"
    );
    let admission = json!({
        "model": model,
        "tokens_budget": budget,
        "tokens_submitted": submitted,
        "tokens_over": submitted - budget,
        "suggest_truncate_to": budget.saturating_sub(output),
        "context_window": window,
    });
    Err(ApiError::context_window_exceeded(message, admission))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_uses_the_margin_and_says_how_far_over() {
        let settings = WindowSettings {
            admission: true,
            ..WindowSettings::default()
        };
        // 4096 with a 5 % margin: 3891.
        assert!(admit("m", 4096, 3000, 891, &settings).is_ok());
        let err = admit("m", 4096, 3000, 892, &settings).unwrap_err();
        assert_eq!((err.status, err.code), (413, "context_window_exceeded"));
        assert_eq!(
            err.message,
            "prompt + max_tokens (3000 + 892 = 3892) exceeds \"m\" context budget 3891 (window 4096, safety margin applied)"
        );
        let block = err.extra.unwrap().admission.unwrap();
        assert_eq!(block["tokens_over"], 1);
        assert_eq!(block["suggest_truncate_to"], 2999);
        let err = admit("m", 4096, 10, 5000, &settings).unwrap_err();
        assert_eq!(
            err.extra.unwrap().admission.unwrap()["suggest_truncate_to"],
            0
        );
        let wide = WindowSettings {
            margin_percent: 100,
            ..settings
        };
        assert!(
            admit("m", 4096, 2000, 48, &wide).is_ok(),
            "the margin is at most 50 %"
        );
        assert!(admit("m", 4096, 2000, 49, &wide).is_err());
    }
}
