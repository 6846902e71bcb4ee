"""Chat prompt formats, rendered in plain Python (no Jinja engine in the browser):
ChatML (SmolLM2, Qwen) and Llama 3. Which one a model uses is read off the chat template
string in its manifest."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ChatTemplate:
    name: str
    default_system_prompt: str | None = None

    @classmethod
    def from_template_string(cls, template: str | None) -> "ChatTemplate":
        if not template:
            raise ValueError("the model's manifest has no chat template")
        if "<|im_start|>" in template:
            # SmolLM2's template inserts a fixed system turn when the chat has none.
            found = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", template, re.S)
            return cls("chatml", found.group(1) if found and "!= 'system'" in template else None)
        if "<|start_header_id|>" in template:
            return cls("llama3")
        raise ValueError("unsupported chat template: only ChatML and Llama 3 formats are known")

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text for `messages` ([{"role", "content"}]), special tokens as text."""
        if messages and messages[0]["role"] != "system" and self.default_system_prompt is not None:
            messages = [{"role": "system", "content": self.default_system_prompt}, *messages]
        if self.name == "chatml":
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
            return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
        text = "<|begin_of_text|>" + "".join(
            f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>" for m in messages
        )
        return text + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")
