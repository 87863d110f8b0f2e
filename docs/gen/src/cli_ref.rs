//! Markdown reference of a binary's command line, rendered from its
//! `clap::Command`: every flag with its environment variable, default,
//! accepted values and help, subcommands included.

use clap::{Arg, ArgAction, Command};

use crate::markdown::{cell, code, table};

/// The reference section of one binary: a `##` heading, its description,
/// the usage line and one table per (sub)command.
pub fn render(mut command: Command) -> String {
    command.build();
    let mut out = String::new();
    let name = command.get_name().to_owned();
    out.push_str(&format!("## `{name}`\n\n"));
    render_command(&mut out, &command, &name, 0);
    out
}

fn render_command(out: &mut String, command: &Command, path: &str, depth: usize) {
    if depth > 0 {
        out.push_str(&format!("### `{path}`\n\n"));
    }
    let about = command
        .get_long_about()
        .or_else(|| command.get_about())
        .map(|text| text.to_string())
        .unwrap_or_default();
    if !about.trim().is_empty() {
        out.push_str(about.trim());
        out.push_str("\n\n");
    }
    let rows: Vec<Vec<String>> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && !is_builtin(arg))
        .map(row)
        .collect();
    if rows.is_empty() {
        out.push_str("No options besides `--help`.\n\n");
    } else {
        out.push_str(&table(
            &["Flag", "Environment variable", "Default", "Description"],
            &rows,
        ));
        out.push('\n');
    }
    for sub in command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
    {
        render_command(out, sub, &format!("{path} {}", sub.get_name()), depth + 1);
    }
}

/// `--help` and `--version`, which every binary has.
fn is_builtin(arg: &Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

fn row(arg: &Arg) -> Vec<String> {
    vec![flag(arg), env(arg), default(arg), description(arg)]
}

fn flag(arg: &Arg) -> String {
    let value = value_name(arg);
    let spelled = match (arg.get_long(), arg.get_short()) {
        (Some(long), Some(short)) => format!("-{short}, --{long}{value}"),
        (Some(long), None) => format!("--{long}{value}"),
        (None, Some(short)) => format!("-{short}{value}"),
        (None, None) => format!("<{}>", arg.get_id().as_str().to_uppercase()),
    };
    code(&spelled)
}

fn value_name(arg: &Arg) -> String {
    if !arg.get_action().takes_values() || arg.get_long().is_none() && arg.get_short().is_none() {
        return String::new();
    }
    let name = arg
        .get_value_names()
        .and_then(|names| names.first().map(|n| n.to_string()))
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    format!(" <{name}>")
}

fn env(arg: &Arg) -> String {
    arg.get_env()
        .map(|name| code(&name.to_string_lossy()))
        .unwrap_or_default()
}

fn default(arg: &Arg) -> String {
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    if defaults.is_empty() {
        if arg.is_required_set() {
            "required".to_owned()
        } else {
            String::new()
        }
    } else if defaults.iter().all(|value| value.is_empty()) {
        "`\"\"`".to_owned()
    } else {
        code(&defaults.join(","))
    }
}

fn description(arg: &Arg) -> String {
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(|text| text.to_string())
        .unwrap_or_default();
    let mut text = cell(&help);
    // A help heading groups flags in `--help`; the table names it per flag.
    if let Some(heading) = arg.get_help_heading() {
        text = format!("*{heading}:* {text}");
    }
    // clap drops the final period of one-sentence doc comments; put it back
    // so that appended notes read as sentences.
    if !text.is_empty() && !text.ends_with(['.', '!', '?']) {
        text.push('.');
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| code(value.get_name()))
        .collect();
    let is_bool_set = matches!(arg.get_action(), ArgAction::Set)
        && values.len() == 2
        && values.contains(&code("true"))
        && values.contains(&code("false"));
    if !values.is_empty() && !is_bool_set {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(&format!("One of: {}.", values.join(", ")));
    } else if is_bool_set {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str("`true` or `false`.");
    }
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        if !text.is_empty() {
            text.push(' ');
        }
        if arg.get_env().is_some() {
            text.push_str("Switch (no value); the variable takes `true` or `false`.");
        } else {
            text.push_str("Switch (no value).");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Demo.
    #[derive(Parser)]
    #[command(name = "demo", about = "Does demo things")]
    struct Demo {
        /// Where to listen.
        #[arg(long, env = "DEMO_LISTEN", default_value = "0.0.0.0:80")]
        listen: String,
        /// Turn it on.
        #[arg(long, env = "DEMO_ON", default_value_t = false, action = ArgAction::Set)]
        on: bool,
        /// Just a switch.
        #[arg(long)]
        dry_run: bool,
        /// Hidden.
        #[arg(long, hide = true)]
        secret: Option<String>,
    }

    #[test]
    fn renders_flags_env_defaults_and_help() {
        let text = render(<Demo as clap::CommandFactory>::command());
        assert!(
            text.starts_with("## `demo`\n\nDoes demo things\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "| `--listen <LISTEN>` | `DEMO_LISTEN` | `0.0.0.0:80` | Where to listen. |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| `--on <ON>` | `DEMO_ON` | `false` | Turn it on. `true` or `false`. |"),
            "{text}"
        );
        assert!(
            text.contains("| `--dry-run` |  | `false` | Just a switch. Switch (no value). |"),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");
        assert!(!text.contains("--help"), "{text}");
    }
}
