"""Conversations to token ids, with a mask of the tokens the chat template added, and the one
truncation rule.

The template mask comes from character offsets: the rendered template text is tokenized with
offsets, and a token is "content" when it lies inside one of the messages' own text spans; every
other token (system prompt, role markers, BOS, separators) belongs to the template.
"""

from __future__ import annotations

from jinja2 import TemplateError

ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))  # characters no one sees


def blank(text: str) -> bool:
    """Nothing a reader would see: whitespace and zero-width characters only."""
    return not text.translate(ZERO_WIDTH).strip()


def opening(conversation: list) -> str:
    """The first words of a conversation's first non-empty turn: how a user finds it in the file."""
    text = next((m["content"] for m in conversation if not blank(m["content"])), "")
    return " ".join(text.split())[:40]


class TemplateRefusal(ValueError):
    """A chat template's own error on a conversation (jinja's TemplateError, a raise_exception call),
    naming the conversation by its opening words."""

    def __init__(self, conversation: list, err: Exception):
        self.opening, self.reason = opening(conversation), f"{type(err).__name__}: {err}"
        super().__init__(f"the chat template refuses the conversation starting {self.opening!r}: {self.reason}")


def render(tokenizer, conversation: list[dict], add_generation_prompt: bool = False) -> str:
    """The conversation as the model sees it: its chat template, or plain text joined by blank
    lines for models without one."""
    if getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except TemplateError as err:  # the template's own refusal, on this conversation's content
            raise TemplateRefusal(conversation, err) from err
    text = "\n\n".join(m["content"] for m in conversation)
    return text + "\n\n" if add_generation_prompt else text


def tokenize_conversation(tokenizer, conversation: list[dict], add_generation_prompt: bool = False):
    """(ids, is_template): token ids of the rendered conversation and, per token, whether the
    template added it. Plain-text rendering adds the tokenizer's special tokens (e.g. BOS)."""
    text = render(tokenizer, conversation, add_generation_prompt)
    templated = bool(getattr(tokenizer, "chat_template", None))
    encoding = tokenizer(text, add_special_tokens=not templated, return_offsets_mapping=True)
    spans = content_spans(tokenizer, conversation, text, add_generation_prompt)
    is_template = []
    for begin, end in encoding["offset_mapping"]:
        inside = end > begin and any(s <= begin and end <= e for s, e in spans)
        is_template.append(not inside)
    return list(encoding["input_ids"]), is_template


PLACEHOLDER = "ELSIMESSAGECONTENT"  # letters only: what a template trims or escapes, it leaves as is


def content_spans(tokenizer, conversation: list[dict], text: str, add_generation_prompt: bool = False) -> list:
    """(start, end) in `text` of each message's own text as the template rendered it (trimmed, say).
    A message is located by rendering the conversation with a placeholder for its content: the text
    before the placeholder and after it are the template's, so the rest of `text` is the message's. Where
    a template renders the placeholder otherwise (it branches on the content), the content's first
    occurrence after the previous message is taken instead."""
    spans, cursor = [], 0
    for i, message in enumerate(conversation):
        content = message["content"]
        if not content:
            continue
        span = None
        if getattr(tokenizer, "chat_template", None):
            marked = [*conversation[:i], {**message, "content": PLACEHOLDER}, *conversation[i + 1 :]]
            try:
                shown = render(tokenizer, marked, add_generation_prompt)
            except TemplateRefusal:
                shown = ""
            at = shown.find(PLACEHOLDER)
            before, after = shown[:at], shown[at + len(PLACEHOLDER) :]
            if at >= 0 and text.startswith(before) and text.endswith(after) and len(before) + len(after) <= len(text):
                span = (len(before), len(text) - len(after))
        if span is None:
            start = text.find(content, cursor)
            span = (start, start + len(content)) if start >= 0 else None
        if span is not None:
            spans.append(span)
            cursor = span[1]
    return spans


def truncate(ids: list, max_length: int) -> list:
    """The one truncation rule, for replies and capture alike: a sequence longer than `max_length`
    keeps its first `max_length` tokens. The start holds the system prompt and the first-token
    attention sink that the statistics depend on; a reply to a prompt that already fills
    `max_length` lies past the cut and never enters them."""
    return ids[:max_length]


def reply_starts(tokenizer, conversations, max_length: int) -> list[int]:
    """Index of each conversation's first reply token: the length of its prompt rendered with the
    generation prompt (which must be a prefix of the full rendering), cut to `max_length`."""
    starts = []
    for i, conversation in enumerate(conversations):
        if conversation[-1]["role"] != "assistant":
            raise ValueError(f"conversation {i} does not end with an assistant reply")
        full = tokenize_conversation(tokenizer, conversation)[0]
        prompt = tokenize_conversation(tokenizer, conversation[:-1], add_generation_prompt=True)[0]
        if full[: len(prompt)] != prompt:
            raise ValueError(
                f"conversation {i}: the prompt with its generation prompt is not a prefix of the "
                "rendered conversation; replies cannot be located"
            )
        starts.append(min(len(prompt), max_length))
    return starts
