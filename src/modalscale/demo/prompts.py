"""Real text prompts for the demo, as users of a multimodal search/captioning service write them.

Written for this project (no third-party text). The demo picks the prompt whose token count is closest to
what the trace asks for, so the text encoder's cost follows the trace.
"""

from __future__ import annotations

PROMPTS: tuple[str, ...] = (
    "What is in this picture?",
    "Describe the photo in one sentence.",
    "Is there a cat in the image?",
    "Find products that look like this.",
    "What colour is the cup on the table?",
    "Write a short caption for a travel blog.",
    "How many people are standing near the window?",
    "Summarise the scene for a visually impaired reader, mentioning the main objects and where they are.",
    "Does this image contain any text? If so, transcribe it exactly and say where it appears.",
    "Compare the lighting in this photo with a typical studio portrait and suggest two improvements.",
    "Classify the image as indoor or outdoor and explain which details in the picture support your answer.",
    "A customer uploaded this photo of a damaged parcel. Describe the visible damage, estimate whether the "
    "contents could be affected, and draft a polite reply that asks for one more photo of the label.",
    "You are helping a museum catalogue its collection. Give the object a title, list its materials and "
    "colours, estimate its period, and write a two-sentence description suitable for a public label.",
    "Rank these search results by how well they match the query 'red running shoes for trail running in "
    "wet weather', and explain in one line per result why it ranks where it does.",
    "Read the following support ticket and classify its urgency as low, medium or high: the dashboard has "
    "been loading slowly since this morning for the whole finance team, and the month-end report is due "
    "tomorrow at noon, so we need at least a workaround before the end of the day.",
)


def prompt_for_tokens(tokens: int, count_tokens: object = None) -> str:
    """The prompt whose length in words is closest to ``tokens`` (words approximate WordPiece tokens)."""
    return min(PROMPTS, key=lambda p: abs(len(p.split()) - tokens))
