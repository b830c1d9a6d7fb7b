// Text from a spec, an image, the environment or a task, made safe to put inside one of the
// runner's lines (or a status message): every control character shows as an escape instead of
// acting. A newline in a `workingDir` or a `PATH` would otherwise end the runner's line and start
// another with whatever follows (the progress marker, say: docs/design.md, "Live progress"), and an
// ESC would drive the reader's terminal.
//
// Escaped: C0 (U+0000-U+001F, tab and newline included), DEL, C1 (U+0080-U+009F, NEL among them)
// and the Unicode line and paragraph separators (U+2028, U+2029), which some readers take for
// line ends. A backslash is kept as it is: the form is for reading, not for decoding, and so
// escaping twice (the runner's message, then the controller's condition) changes nothing more.

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it finds
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;
const CONTROL_ANY = new RegExp(CONTROL.source);

const NAMED: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function escapeOne(char: string): string {
  const named = NAMED[char];
  if (named) return named;
  const code = char.charCodeAt(0);
  return code < 0x80
    ? `\\x${code.toString(16).padStart(2, "0")}`
    : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** `text` with each control character as a visible escape (`\n`, `\x1b`, `\u2028`); the rest as it is. */
export function escapeControls(text: string): string {
  return CONTROL_ANY.test(text) ? text.replace(CONTROL, escapeOne) : text;
}

/** Whether `text` holds a character escapeControls escapes. */
export function hasControls(text: string): boolean {
  return CONTROL_ANY.test(text);
}
