//! How output looks where it goes: colour and progress bars only on a
//! terminal, never with `NO_COLOR` set (https://no-color.org); plain lines
//! for logs and pipes.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where the output goes, decided once per command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminal {
    /// Standard output is a terminal.
    pub tty: bool,
    /// Colour is wanted: a terminal and no `NO_COLOR`.
    pub colour: bool,
}

impl Terminal {
    pub fn detect() -> Terminal {
        let tty = std::io::stdout().is_terminal();
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Terminal {
            tty,
            colour: tty && !no_colour,
        }
    }

    /// For tests and pipes.
    pub const PLAIN: Terminal = Terminal {
        tty: false,
        colour: false,
    };

    /// `text` in a colour, when colour is wanted (ANSI SGR `code`).
    pub fn paint(&self, code: Paint, text: &str) -> String {
        if self.colour {
            format!("\u{1b}[{}m{text}\u{1b}[0m", code as u8)
        } else {
            text.to_owned()
        }
    }
}

/// The few colours used: good, attention, bad, and quiet.
#[derive(Clone, Copy, Debug)]
pub enum Paint {
    Green = 32,
    Yellow = 33,
    Red = 31,
    Dim = 2,
    Bold = 1,
}

/// Reports progress of long work: a bar (or spinner) on a terminal, and a
/// plain line whenever the message changes otherwise.
pub struct Progress {
    bar: Option<ProgressBar>,
    last: String,
}

impl Progress {
    /// `total`: the amount of work when known (bytes, say), else a spinner.
    pub fn start(terminal: Terminal, total: Option<u64>) -> Progress {
        if !terminal.tty {
            return Progress {
                bar: None,
                last: String::new(),
            };
        }
        let bar = match total {
            Some(total) => {
                let bar = ProgressBar::new(total);
                if let Ok(style) = ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg}",
                ) {
                    bar.set_style(style);
                }
                bar
            }
            None => {
                let bar = ProgressBar::new_spinner();
                if let Ok(style) =
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                {
                    bar.set_style(style);
                }
                bar
            }
        };
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress {
            bar: Some(bar),
            last: String::new(),
        }
    }

    /// The current state of the work, and how far it got when known.
    pub fn update(&mut self, message: &str, position: Option<u64>) {
        match &self.bar {
            Some(bar) => {
                if let Some(position) = position {
                    bar.set_position(position);
                }
                bar.set_message(message.to_owned());
            }
            None if message != self.last => eprintln!("{message}"),
            None => {}
        }
        message.clone_into(&mut self.last);
    }

    /// Done (or given up): the bar goes, the final line is the caller's.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
