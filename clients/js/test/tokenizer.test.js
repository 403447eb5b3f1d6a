import assert from "node:assert/strict";
import { test } from "node:test";
import { capitalize, endsSentence, isWord, join, lookupKey, render, split, words } from "../src/deniable.js";

test("split keeps every separator byte for byte and words at odd positions", () => {
  const text = "Hi, wörld_x e\u0301 日本 😀 שלום.\n";
  const parts = split(text);
  assert.equal(join(parts), text);
  assert.deepEqual(words(text), ["Hi", "wörld", "x", "e\u0301", "日本", "שלום"]);
  assert.equal(parts[0], "");
  assert.equal(parts.length % 2, 1);
});

test("edge cases: empty, only separators, only one word", () => {
  assert.deepEqual(split(""), [""]);
  assert.deepEqual(split(" _ "), [" _ "]);
  assert.deepEqual(split("word"), ["", "word", ""]);
  assert.throws(() => split(42), TypeError);
});

test("a word is a letter or digit (Python's isalnum), then letters, digits and combining marks", () => {
  assert.ok(isWord("naïve"));
  assert.ok(isWord("na\u0308ive")); // a decomposed accent stays inside the word
  assert.ok(isWord("नमस्ते")); // Devanagari vowel signs and virama are marks
  assert.ok(isWord("٣٤"));
  assert.ok(isWord("e\u0301"));
  assert.ok(!isWord("\u0301e")); // a word never starts with a mark
  assert.ok(!isWord("a_b"));
  assert.ok(!isWord(""));
  assert.deepEqual(words("na\u0308ive x"), ["na\u0308ive", "x"]);
});

test("lookup keys are NFC: a decomposed and a composed accent are the same word", () => {
  assert.equal(lookupKey("nai\u0308ve"), "naïve"); // naïve decomposed
  assert.equal(lookupKey("na\u0308ive"), "n\u00e4ive"); // the spelling: ä, not ï
  assert.equal(lookupKey("NAI\u0308VE", true), "naïve");
  assert.equal(lookupKey("Hockey", true), "hockey");
  assert.equal(lookupKey("Hockey"), "Hockey");
});

test("sentence ends: . ! ? then whitespace, closing quotes allowed", () => {
  assert.ok(endsSentence(". "));
  assert.ok(endsSentence('!" '));
  assert.ok(endsSentence("?\u201d\n"));
  assert.ok(endsSentence(".\x1c")); // Python's \s includes U+001C
  assert.ok(!endsSentence(".\ufeff")); // and not U+FEFF (JavaScript's \s does)
  assert.ok(!endsSentence(", "));
  assert.ok(!endsSentence("."));
});

test("render: sentence case capitalizes the first word and words after a sentence end", () => {
  const parts = split("the game. it was great! yes");
  assert.equal(render(parts, ["a", "b", "c", "d", "e", "f"]), "A b. C d e! F");
  assert.equal(render(parts, ["a", "b", "c", "d", "e", "f"], { caseMode: "lower" }), "a b. c d e! f");
  assert.equal(capitalize("élan"), "Élan");
  assert.equal(capitalize("ßx"), "SSx");
});
