// `$regex` on JavaScript's RegExp, held to Herald's rules: look-around and backreferences are
// refused with `unsupported_regex` (the server's engine is linear-time and has neither), options
// are i m s x, and PCRE's `$` also matches before a final newline.
import { QueryError, REGEX_BYTES_MAX } from "./errors.js";

export class Pattern {
  private constructor(
    private readonly re: RegExp,
    private readonly dollarBeforeFinalNewline: boolean,
  ) {}

  static compile(path: string, source: string, options: string): Pattern {
    if (new TextEncoder().encode(source).length > REGEX_BYTES_MAX)
      throw new QueryError(
        "limit_exceeded",
        `regular expression at '${path}' is longer than ${REGEX_BYTES_MAX} bytes`,
      );
    let flags = "u";
    let extended = false;
    let multiline = false;
    // A leading inline group (`(?i)`) sets options for the whole pattern, as the server's does.
    const inline = /^\(\?([imsx]+)\)/.exec(source);
    if (inline) {
      source = source.slice(inline[0].length);
      options += inline[1];
    }
    for (const c of options) {
      if (c === "i" || c === "m" || c === "s") {
        if (!flags.includes(c)) flags += c;
        if (c === "m") multiline = true;
      } else if (c === "x") extended = true;
      else
        throw new QueryError(
          "bad_regex",
          `bad regular expression at '${path}': unknown $options flag '${c}' (allowed: i m s x)`,
        );
    }
    const scan = scanPattern(source, extended);
    if (scan.unsupported)
      throw new QueryError(
        "unsupported_regex",
        `unsupported regular expression at '${path}': ${scan.unsupported} (Herald's regex engine runs in linear time)`,
      );
    let re: RegExp;
    try {
      re = new RegExp(scan.source, flags);
    } catch (e) {
      try {
        // Rust's regex accepts some escapes that unicode-mode RegExp refuses (`\-` outside a class).
        re = new RegExp(scan.source, flags.replace("u", ""));
      } catch {
        throw new QueryError("bad_regex", `bad regular expression at '${path}': ${(e as Error).message}`);
      }
    }
    return new Pattern(re, !multiline && scan.dollar && !scan.endText);
  }

  test(s: string): boolean {
    return (
      this.re.test(s) ||
      (this.dollarBeforeFinalNewline && s.endsWith("\n") && this.re.test(s.slice(0, -1)))
    );
  }
}

interface Scan {
  source: string;
  unsupported?: string;
  dollar: boolean;
  endText: boolean;
}

/** Walks the pattern once: finds refused syntax, `$` and `\z`, and applies the `x` option. */
function scanPattern(src: string, extended: boolean): Scan {
  let out = "";
  let inClass = false;
  let dollar = false;
  let endText = false;
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === "\\") {
      const d = src[i + 1] ?? "";
      if (!inClass && /[1-9]/.test(d)) return { source: src, unsupported: "backreferences are not supported", dollar, endText };
      if (!inClass && d === "k" && src[i + 2] === "<")
        return { source: src, unsupported: "backreferences are not supported", dollar, endText };
      if (d === "z") {
        endText = true;
        out += "(?![\\s\\S])";
        i++;
        continue;
      }
      if (d === "A") {
        out += "(?<![\\s\\S])";
        i++;
        continue;
      }
      out += c + d;
      i++;
      continue;
    }
    if (inClass) {
      if (c === "]") inClass = false;
      out += c;
      continue;
    }
    if (c === "[") {
      inClass = true;
      out += c;
      // A leading ']' or '^]' is literal.
      if (src[i + 1] === "^") out += src[++i];
      if (src[i + 1] === "]") out += "\\" + src[++i];
      continue;
    }
    if (c === "(" && src[i + 1] === "?") {
      const ahead = src.slice(i + 2, i + 4);
      if (ahead.startsWith("=") || ahead.startsWith("!") || ahead === "<=" || ahead === "<!")
        return { source: src, unsupported: "look-around is not supported", dollar, endText };
      if (ahead.startsWith("P<")) {
        // Rust's (?P<name>...) is JS's (?<name>...).
        out += "(?<";
        i += 3;
        continue;
      }
    }
    if (c === "$") dollar = true;
    if (extended) {
      if (/\s/.test(c)) continue;
      if (c === "#") {
        while (i < src.length && src[i] !== "\n") i++;
        continue;
      }
    }
    out += c;
  }
  return { source: out, dollar, endText };
}
