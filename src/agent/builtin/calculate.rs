//! `calculate`: a safe arithmetic evaluator for the built-in calculator tool.
//!
//! Input comes from a model or a user, so it is parsed by hand and evaluated directly: there is
//! no code execution, input size and nesting are bounded, and every intermediate must be finite.

/// Longest accepted expression, in characters.
pub const MAX_LEN: usize = 1_000;

/// Deepest accepted nesting of parentheses, calls and exponents.
pub const MAX_DEPTH: usize = 64;

/// Why an expression could not be evaluated; positions are zero-based character indexes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    /// Nothing but whitespace.
    #[error("empty expression")]
    Empty,
    /// A character or token that does not fit where it appears.
    #[error("unexpected `{ch}` at position {at}")]
    UnexpectedChar {
        /// The offending character (the first of its token).
        ch: char,
        /// Where it is.
        at: usize,
    },
    /// The expression stops in the middle (e.g. `2 +` or `(1`).
    #[error("unexpected end of expression")]
    UnexpectedEnd,
    /// A complete expression followed by more input (e.g. `2 3`).
    #[error("unexpected input after the expression at position {at}")]
    Trailing {
        /// Where the extra input starts.
        at: usize,
    },
    /// `1,000` or `1_000`: digit grouping is ambiguous with argument lists, so it is refused.
    #[error("digit separators are not supported (at position {at}); write 1000, not 1,000")]
    DigitSeparator {
        /// Where the separator is.
        at: usize,
    },
    /// A name that is neither a known function nor a constant.
    #[error("unknown function or constant `{0}`")]
    UnknownName(String),
    /// A function name used without an argument list (e.g. `sqrt 4`).
    #[error("function `{0}` needs parentheses, as in {0}(2)")]
    MissingParen(String),
    /// A function called with the wrong number of arguments.
    #[error("`{name}` takes {expected} argument(s), got {got}")]
    WrongArity {
        /// The function.
        name: String,
        /// How many it takes (`1`, `at least 1`).
        expected: String,
        /// How many it was given.
        got: usize,
    },
    /// Division or remainder by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// The result or an intermediate value is infinite or not a number.
    #[error("the result is not a finite number")]
    NotFinite,
    /// The expression is longer than [`MAX_LEN`] characters.
    #[error("expression is too long (more than {MAX_LEN} characters)")]
    TooLong,
    /// The expression nests deeper than [`MAX_DEPTH`].
    #[error("expression is nested too deeply (more than {MAX_DEPTH} levels)")]
    TooDeep,
}

/// Evaluates an arithmetic expression such as `2 * (3 + sqrt(16)) ^ 2`.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    // Checked before lexing so a huge input costs one pass and no allocation.
    if expression.chars().nth(MAX_LEN).is_some() {
        return Err(CalcError::TooLong);
    }
    let tokens = lex(expression)?;
    if tokens.is_empty() {
        return Err(CalcError::Empty);
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let value = parser.expr()?;
    match parser.peek() {
        None => Ok(value),
        Some(t) if t.kind == Tok::Comma => Err(parser.comma_error()),
        Some(t) => Err(CalcError::Trailing { at: t.at }),
    }
}

/// Formats a result for people: `14`, `2.5`, `0.3333333333`, `1.2676506e30`.
pub fn format_number(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    if x == 0.0 {
        // Also catches -0, which people do not write.
        return "0".to_string();
    }
    let abs = x.abs();
    if !(1e-9..1e16).contains(&abs) {
        // Fixed notation would print hundreds of digits, or round to zero.
        let s = format!("{x:.9e}");
        return match s.split_once('e') {
            Some((mantissa, exp)) => format!("{}e{exp}", trim_fraction(mantissa)),
            None => s,
        };
    }
    trim_fraction(&format!("{x:.10}")).to_string()
}

/// Drops trailing zeros of a decimal fraction, and the point if nothing is left after it.
fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    Caret,
    LParen,
    RParen,
    Comma,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Tok,
    /// First character, for error messages.
    ch: char,
    at: usize,
}

fn lex(input: &str) -> Result<Vec<Token>, CalcError> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&ch) = chars.get(i) {
        let at = i;
        let kind = match ch {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '0'..='9' | '.' => {
                let (value, end) = lex_number(&chars, i)?;
                i = end;
                Tok::Num(value)
            }
            c if c.is_ascii_alphabetic() => {
                let end = scan(&chars, i, |c| c.is_ascii_alphanumeric() || c == '_');
                let name: String = chars[i..end].iter().collect();
                i = end;
                Tok::Name(name)
            }
            '*' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                Tok::Caret
            }
            _ => {
                i += 1;
                match ch {
                    '+' => Tok::Plus,
                    '-' => Tok::Minus,
                    '*' | '×' => Tok::Star,
                    '/' | '÷' => Tok::Slash,
                    '%' => Tok::Percent,
                    '^' => Tok::Caret,
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    ',' => Tok::Comma,
                    _ => return Err(CalcError::UnexpectedChar { ch, at }),
                }
            }
        };
        tokens.push(Token { kind, ch, at });
    }
    Ok(tokens)
}

/// Reads `12`, `3.5`, `.5`, `1e3` or `2.5E-2` starting at `start`; returns it and where it ends.
fn lex_number(chars: &[char], start: usize) -> Result<(f64, usize), CalcError> {
    let digit = |c: char| c.is_ascii_digit();
    let mut end = scan(chars, start, digit);
    if chars.get(end) == Some(&'.') {
        end = scan(chars, end + 1, digit);
    }
    let has_digits = chars[start..end].iter().any(|&c| digit(c));
    if !has_digits {
        return Err(CalcError::UnexpectedChar { ch: '.', at: start });
    }
    // An `e` without digits after it is not an exponent (and then fails as a name).
    if matches!(chars.get(end), Some('e' | 'E')) {
        let sign = usize::from(matches!(chars.get(end + 1), Some('+' | '-')));
        let exp_end = scan(chars, end + 1 + sign, digit);
        if exp_end > end + 1 + sign {
            end = exp_end;
        }
    }
    if chars.get(end) == Some(&'_') {
        return Err(CalcError::DigitSeparator { at: end });
    }
    let text: String = chars[start..end].iter().collect();
    let value: f64 = text.parse().map_err(|_| CalcError::UnexpectedChar {
        ch: chars[start],
        at: start,
    })?;
    if value.is_finite() {
        Ok((value, end))
    } else {
        Err(CalcError::NotFinite)
    }
}

/// Index of the first character at or after `i` that fails `keep`.
fn scan(chars: &[char], mut i: usize, keep: impl Fn(char) -> bool) -> usize {
    while chars.get(i).is_some_and(|&c| keep(c)) {
        i += 1;
    }
    i
}

/// Recursive descent with one level per precedence; evaluates as it parses.
struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// Every recursion cycle passes through `nested`, which bounds this.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_kind(&self) -> Option<&Tok> {
        self.peek().map(|t| &t.kind)
    }

    fn next(&mut self) -> Result<Token, CalcError> {
        let token = self.peek().cloned().ok_or(CalcError::UnexpectedEnd)?;
        self.pos += 1;
        Ok(token)
    }

    fn unexpected(&self) -> CalcError {
        match self.peek() {
            Some(t) if t.kind == Tok::Comma => self.comma_error(),
            Some(t) => CalcError::UnexpectedChar { ch: t.ch, at: t.at },
            None => CalcError::UnexpectedEnd,
        }
    }

    /// A comma where no argument list is open: `1,000` if a number sits tight against it.
    fn comma_error(&self) -> CalcError {
        let at = self.peek().map_or(0, |t| t.at);
        let is_num = |t: &Token| matches!(t.kind, Tok::Num(_));
        let before = self.pos.checked_sub(1).and_then(|i| self.tokens.get(i));
        let after = self.tokens.get(self.pos + 1);
        if before.is_some_and(is_num) && after.is_some_and(|t| is_num(t) && t.at == at + 1) {
            CalcError::DigitSeparator { at }
        } else {
            CalcError::UnexpectedChar { ch: ',', at }
        }
    }

    fn nested<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, CalcError>,
    ) -> Result<T, CalcError> {
        if self.depth >= MAX_DEPTH {
            return Err(CalcError::TooDeep);
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// expr := term (('+' | '-') term)*
    fn expr(&mut self) -> Result<f64, CalcError> {
        let mut value = self.term()?;
        loop {
            let op = match self.peek_kind() {
                Some(Tok::Plus) => 1.0,
                Some(Tok::Minus) => -1.0,
                _ => return Ok(value),
            };
            self.pos += 1;
            value = finite(value + op * self.term()?)?;
        }
    }

    /// term := unary (('*' | '/' | '%') unary)*
    fn term(&mut self) -> Result<f64, CalcError> {
        let mut value = self.unary()?;
        loop {
            let op = match self.peek_kind() {
                Some(op @ (Tok::Star | Tok::Slash | Tok::Percent)) => op.clone(),
                _ => return Ok(value),
            };
            self.pos += 1;
            let rhs = self.unary()?;
            value = match op {
                Tok::Star => value * rhs,
                _ if rhs == 0.0 => return Err(CalcError::DivisionByZero),
                Tok::Slash => value / rhs,
                _ => value % rhs,
            };
            value = finite(value)?;
        }
    }

    /// unary := ('+' | '-')* power — signs apply after the power, so `-2^2` is -4.
    fn unary(&mut self) -> Result<f64, CalcError> {
        let mut negative = false;
        while let Some(sign @ (Tok::Plus | Tok::Minus)) = self.peek_kind() {
            negative ^= *sign == Tok::Minus;
            self.pos += 1;
        }
        let value = self.power()?;
        Ok(if negative { -value } else { value })
    }

    /// power := atom (('^' | '**') unary)? — right-associative, and `2^-1` is allowed.
    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.atom()?;
        if self.peek_kind() != Some(&Tok::Caret) {
            return Ok(base);
        }
        self.pos += 1;
        let exponent = self.nested(Self::unary)?;
        finite(base.powf(exponent))
    }

    /// atom := number | constant | name '(' args ')' | '(' expr ')'
    fn atom(&mut self) -> Result<f64, CalcError> {
        let token = match self.peek() {
            Some(t) => t.clone(),
            None => return Err(CalcError::UnexpectedEnd),
        };
        match token.kind {
            Tok::Num(value) => {
                self.pos += 1;
                Ok(value)
            }
            Tok::LParen => {
                self.pos += 1;
                let value = self.nested(Self::expr)?;
                self.expect_rparen()?;
                Ok(value)
            }
            Tok::Name(name) => {
                self.pos += 1;
                self.name(name)
            }
            _ => Err(self.unexpected()),
        }
    }

    fn expect_rparen(&mut self) -> Result<(), CalcError> {
        if self.peek_kind() == Some(&Tok::RParen) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn name(&mut self, name: String) -> Result<f64, CalcError> {
        let lower = name.to_ascii_lowercase();
        let is_call = self.peek_kind() == Some(&Tok::LParen);
        match (lower.as_str(), is_call) {
            ("pi", false) => return Ok(std::f64::consts::PI),
            ("e", false) => return Ok(std::f64::consts::E),
            _ => {}
        }
        let Some(function) = Function::from_name(&lower) else {
            return Err(CalcError::UnknownName(name));
        };
        if !is_call {
            return Err(CalcError::MissingParen(lower));
        }
        self.pos += 1;
        let args = self.nested(Self::args)?;
        function.apply(&lower, &args)
    }

    /// args := (expr (',' expr)*)? ')'
    fn args(&mut self) -> Result<Vec<f64>, CalcError> {
        let mut args = Vec::new();
        if self.peek_kind() == Some(&Tok::RParen) {
            self.pos += 1;
            return Ok(args);
        }
        loop {
            args.push(self.expr()?);
            match self.next()?.kind {
                Tok::Comma => {}
                Tok::RParen => return Ok(args),
                _ => {
                    self.pos -= 1;
                    return Err(self.unexpected());
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Function {
    Unary(fn(f64) -> f64),
    Min,
    Max,
}

impl Function {
    fn from_name(name: &str) -> Option<Function> {
        let f: fn(f64) -> f64 = match name {
            "sqrt" => f64::sqrt,
            "abs" => f64::abs,
            "round" => f64::round,
            "floor" => f64::floor,
            "ceil" => f64::ceil,
            "ln" | "log" => f64::ln,
            "log10" => f64::log10,
            "exp" => f64::exp,
            "sin" => f64::sin,
            "cos" => f64::cos,
            "tan" => f64::tan,
            "min" => return Some(Function::Min),
            "max" => return Some(Function::Max),
            _ => return None,
        };
        Some(Function::Unary(f))
    }

    fn apply(self, name: &str, args: &[f64]) -> Result<f64, CalcError> {
        let arity = |expected: &str| CalcError::WrongArity {
            name: name.to_string(),
            expected: expected.to_string(),
            got: args.len(),
        };
        let value = match (self, args) {
            (Function::Unary(f), [x]) => f(*x),
            (Function::Unary(_), _) => return Err(arity("1")),
            (_, []) => return Err(arity("at least 1")),
            (Function::Min, _) => args.iter().copied().fold(f64::INFINITY, f64::min),
            (Function::Max, _) => args.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        };
        finite(value)
    }
}

fn finite(x: f64) -> Result<f64, CalcError> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(CalcError::NotFinite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(s: &str) -> f64 {
        evaluate(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn table() {
        let cases: &[(&str, f64)] = &[
            ("12", 12.0),
            ("3.5", 3.5),
            (".5", 0.5),
            ("1e3", 1000.0),
            ("2.5E-2", 0.025),
            ("1e+2", 100.0),
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("10 - 4 - 3", 3.0),
            ("100 / 10 / 5", 2.0),
            ("7 % 3", 1.0),
            ("-7 % 3", -1.0),
            ("2 ^ 3 ^ 2", 512.0),
            ("2 ** 3 ** 2", 512.0),
            ("-2^2", -4.0),
            ("(-2)^2", 4.0),
            ("2^-1", 0.5),
            ("--3", 3.0),
            ("+-+3", -3.0),
            ("2 * -3", -6.0),
            ("3 × 4 ÷ 6", 2.0),
            ("  12*(3 +4 )  ", 84.0),
            ("sqrt(16) + abs(-3)", 7.0),
            ("round(2.5) + floor(-1.5) + ceil(1.2)", 3.0),
            ("ln(e) + log(1) + log10(1000)", 4.0),
            ("exp(0) + sin(0) + cos(0) + tan(0)", 2.0),
            ("min(3, 1, 2) + max(3, 1, 2)", 4.0),
            ("max(-1)", -1.0),
            ("SQRT(4) + Pi - PI", 2.0),
            ("2 * pi", std::f64::consts::TAU),
            ("sqrt(2)^2", 2.0),
            ("((((1))))", 1.0),
        ];
        for &(input, expected) in cases {
            let got = eval(input);
            assert!(close(got, expected), "{input:?} = {got}, want {expected}");
        }
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval("2 + 3 * 4 ^ 2"), 50.0);
        assert_eq!(eval("2 * 3 % 4"), 2.0);
        assert_eq!(eval("8 / 2 * 4"), 16.0);
        assert_eq!(eval("-3^2 + 1"), -8.0);
        assert_eq!(eval("2^-2^2"), 2f64.powf(-4.0));
    }

    #[test]
    fn errors() {
        use CalcError::*;
        let cases: Vec<(&str, CalcError)> = vec![
            ("", Empty),
            ("   ", Empty),
            ("2 $ 3", UnexpectedChar { ch: '$', at: 2 }),
            ("2 * )", UnexpectedChar { ch: ')', at: 4 }),
            (".", UnexpectedChar { ch: '.', at: 0 }),
            ("2 +", UnexpectedEnd),
            ("(1 + 2", UnexpectedEnd),
            ("sqrt(", UnexpectedEnd),
            ("2 3", Trailing { at: 2 }),
            ("(1) (2)", Trailing { at: 4 }),
            ("2e", Trailing { at: 1 }),
            ("1,000", DigitSeparator { at: 1 }),
            ("1_000", DigitSeparator { at: 1 }),
            ("(1, 2)", UnexpectedChar { ch: ',', at: 2 }),
            ("foo(1)", UnknownName("foo".into())),
            ("x + 1", UnknownName("x".into())),
            ("sqrt 4", MissingParen("sqrt".into())),
            ("pi(2)", UnknownName("pi".into())),
            (
                "sqrt(1, 2)",
                WrongArity {
                    name: "sqrt".into(),
                    expected: "1".into(),
                    got: 2,
                },
            ),
            (
                "Max()",
                WrongArity {
                    name: "max".into(),
                    expected: "at least 1".into(),
                    got: 0,
                },
            ),
            ("1 / 0", DivisionByZero),
            ("5 % (2 - 2)", DivisionByZero),
            ("sqrt(-1)", NotFinite),
            ("10^400", NotFinite),
            ("1e400", NotFinite),
            ("ln(0)", NotFinite),
            ("0^-1", NotFinite),
        ];
        for (input, expected) in cases {
            assert_eq!(evaluate(input), Err(expected), "{input:?}");
        }
    }

    #[test]
    fn trailing_vs_implicit_product() {
        // "2e" lexes as 2 followed by the name e, a trailing token, not an exponent.
        assert_eq!(evaluate("2 e"), Err(CalcError::Trailing { at: 2 }));
    }

    #[test]
    fn size_and_depth_limits() {
        assert_eq!(evaluate(&"(".repeat(100_000)), Err(CalcError::TooLong));
        assert_eq!(evaluate(&"1".repeat(1_001)), Err(CalcError::TooLong));
        assert!(evaluate(&format!("{}1{}", "(".repeat(64), ")".repeat(64))).is_ok());
        let deep = format!("{}1{}", "(".repeat(65), ")".repeat(65));
        assert_eq!(evaluate(&deep), Err(CalcError::TooDeep));
        // Worst cases that fit in 1,000 characters must fail cleanly, not overflow the stack.
        assert_eq!(evaluate(&"(".repeat(1_000)), Err(CalcError::TooDeep));
        assert_eq!(evaluate(&"sqrt(".repeat(200)), Err(CalcError::TooDeep));
        assert_eq!(evaluate(&"-".repeat(999)), Err(CalcError::UnexpectedEnd));
        assert_eq!(evaluate(&format!("{}1", "-".repeat(999))), Ok(-1.0));
        assert_eq!(evaluate(&"1^".repeat(500)), Err(CalcError::TooDeep));
        assert_eq!(evaluate(&format!("{}1", "1^".repeat(60))), Ok(1.0));
    }

    #[test]
    fn error_messages() {
        assert_eq!(CalcError::DivisionByZero.to_string(), "division by zero");
        assert_eq!(
            CalcError::UnknownName("foo".into()).to_string(),
            "unknown function or constant `foo`"
        );
        assert_eq!(
            evaluate("2 $ 3").unwrap_err().to_string(),
            "unexpected `$` at position 2"
        );
        assert!(evaluate("1,000")
            .unwrap_err()
            .to_string()
            .contains("write 1000"));
    }

    #[test]
    fn formats_numbers() {
        assert_eq!(format_number(eval("0.1 + 0.2")), "0.3");
        assert_eq!(format_number(14.0), "14");
        assert_eq!(format_number(2.5), "2.5");
        assert_eq!(format_number(1.0 / 3.0), "0.3333333333");
        assert_eq!(format_number(-0.0), "0");
        assert_eq!(format_number(-1e-12), "-1e-12");
        assert_eq!(format_number(-2.75), "-2.75");
        assert_eq!(format_number(1024.0), "1024");
        assert_eq!(format_number(2f64.powi(100)), "1.2676506e30");
        assert_eq!(format_number(-0.00000000001), "-1e-11");
        assert_eq!(format_number(-0.000000001), "-0.000000001");
        assert_eq!(format_number(1e15), "1000000000000000");
    }
}
