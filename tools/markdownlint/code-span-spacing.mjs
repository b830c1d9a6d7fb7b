// A code span glued to the word before or after it ("waits`killGrace`", "`$FILE`(exclusively")
// is what a formatter leaves when it moved a span's spaces outside it, and it shifts which
// backticks pair up further on.
const WORD = /[\p{L}\p{N}]/u;

function* codeSpans(tokens) {
  for (const token of tokens) {
    if (token.type === "codeText") yield token;
    else if (token.children) yield* codeSpans(token.children);
  }
}

export default {
  names: ["code-span-spacing"],
  description: "Code span glued to the word beside it",
  tags: ["code", "spaces"],
  parser: "micromark",
  function: (params, onError) => {
    for (const span of codeSpans(params.parsers.micromark.tokens)) {
      const before = params.lines[span.startLine - 1]?.[span.startColumn - 2] ?? "";
      const after = params.lines[span.endLine - 1]?.[span.endColumn - 1] ?? "";
      if (WORD.test(before) || WORD.test(after) || after === "(") {
        onError({
          lineNumber: span.startLine,
          detail: "put a space between the code span and the word beside it",
          context: `${before}${span.text.length > 30 ? `${span.text.slice(0, 27)}...` : span.text}${after}`,
        });
      }
    }
  },
};
