"""Images and video through the engines: what is uploaded / handed to vLLM, and token accounting."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from kimik3 import Client, K3Tokenizer, MediaError, RemoteEngine, ScriptedEngine, VideoTooLongError, VLLMEngine
from kimik3.engines import ChatRequest
from kimik3.formats.k3 import render_output
from kimik3.formats.k3._codec import media_scan
from kimik3.formats.k3._media import expand_videos, image_prompt_tokens
from kimik3.media import image_token_count, prepare_image, sample_video
from kimik3.types import ImagePart, TextPart, UserMessage, VideoPart, VideoURL
from tests.k3vocab import write_model_dir

MEDIA = Path(__file__).resolve().parents[1] / "data" / "media"
RGBA = MEDIA / "rgba.png"
CLIP = MEDIA / "test_non_zero_start.mp4"


def image_message(path: Path, text: str = "What is this?") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": str(path)}}, {"type": "text", "text": text}]}


def decode(url: str) -> Image.Image:
    assert url.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))


def transparent_pixel(path: Path) -> tuple[int, int]:
    im = Image.open(path).convert("RGBA")
    alpha = im.getchannel("A")
    for y in range(im.height):
        for x in range(im.width):
            if alpha.getpixel((x, y)) == 0:
                return x, y
    raise AssertionError("no transparent pixel")


async def test_remote_chat_uploads_the_composited_png() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "k3",
                 "choices": [{"index": 0, "delta": {"content": "a chart"}, "finish_reason": "stop"}]}
        return httpx.Response(200, content=f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode(),
                              headers={"content-type": "text/event-stream"})

    client = openai.AsyncOpenAI(base_url="http://fake/v1", api_key="k", http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    engine = RemoteEngine(model="k3", client=client)
    # a local path in a message is read only when the engine allows it: same error whether the
    # file exists or not, and nothing is sent
    for path in (RGBA, Path("/nonexistent/secret.png"), Path("/etc/shadow")):
        with pytest.raises(MediaError) as e:
            await Client(engine).chat([image_message(path)])
        assert str(e.value) == (f"an image part names a local file ({str(path)!r}); files are read only when the "
                                "engine allows it (engine.allow_local_files = True); send a data: URL otherwise")
    assert bodies == []
    engine.allow_local_files = True
    with pytest.raises(MediaError, match=r"^cannot read the image file '/nonexistent/secret\.png': No such file"):
        await Client(engine).chat([image_message(Path("/nonexistent/secret.png"))])
    out = await Client(engine).chat([image_message(RGBA)])
    assert out.message.content == "a chart"
    part = bodies[0]["messages"][0]["content"][0]
    uploaded = decode(part["image_url"]["url"])
    assert uploaded.mode == "RGB" and uploaded.size == (1280, 720)  # no resize needed at this size
    x, y = transparent_pixel(RGBA)
    board = 180 if (x // 8 + y // 8) % 2 else 255  # chessboard anchored at (0,0), 8 px squares
    assert uploaded.getpixel((x, y)) == (board, board, board)
    assert uploaded.tobytes() == prepare_image(RGBA).image.tobytes()
    assert bodies[0]["messages"][0]["content"][1] == {"type": "text", "text": "What is this?"}


def test_embedded_engine_gets_prepared_images() -> None:
    engine = VLLMEngine("/nonexistent/model")  # not started: only the image preparation runs
    request = ChatRequest(messages=[image_message(RGBA), image_message(MEDIA / "Landscape_6.jpg")])
    with pytest.raises(MediaError, match="names a local file"):
        engine.prepare_images(media_scan(request.messages).images)
    engine.allow_local_files = True
    images = engine.prepare_images(media_scan(request.messages).images)
    assert [im.size for im in images] == [(1280, 720), (1800, 1200)]  # EXIF orientation applied
    assert all(im.mode == "RGB" for im in images)
    x, y = transparent_pixel(RGBA)
    board = 180 if (x // 8 + y // 8) % 2 else 255
    assert images[0].getpixel((x, y)) == (board, board, board)


async def test_image_token_accounting(tmp_path: Path) -> None:
    tok = K3Tokenizer.from_pretrained(write_model_dir(tmp_path / "k3", num_base_tokens=163_584))
    answer = render_output({"reasoning_content": "r", "content": "a chart"})
    engine = ScriptedEngine([answer, answer], tokenizer=tok)
    engine.allow_local_files = True
    client = Client(engine)
    with_image = await client.chat([image_message(RGBA)])
    ids = tok.encode_messages([image_message(RGBA)])
    assert ids.count(tok.token_id("<|kimi_image_placeholder|>")) == 1
    n = image_token_count(1280, 720)
    assert n == 26 * 46  # ceil(720/28) * ceil(1280/28)
    block = 3 + len(tok.encode_text("image 1280x720")) + n
    assert image_prompt_tokens(tok, 1280, 720, n) == block
    assert with_image.usage.prompt_tokens == len(ids) - 1 + block


async def test_video_parts_become_timestamped_frames() -> None:
    video = sample_video(CLIP)
    assert [c.timestamp for c in video.chunks] == ["00:00:00.000"]
    msg = UserMessage(content=[VideoPart(video_url=VideoURL(url=str(CLIP))), TextPart(text="What happens?")])
    with pytest.raises(MediaError, match=r"^a video part names a local file"):
        expand_videos([msg])
    (expanded,) = expand_videos([msg], allow_local_files=True)
    assert expand_videos([msg], allow_local_files=True)[0] is expanded  # the same copy every turn (prompt caching)
    with pytest.raises(MediaError, match=r"^a video part names a local file"):
        expand_videos([msg])  # the cached expansion does not bypass the check
    assert msg.content[0].type == "video_url"  # type: ignore[union-attr]  # never mutated
    assert isinstance(expanded.content, list)
    kinds = [(p.type, getattr(p, "text", None)) for p in expanded.content]
    assert kinds == [("text", "00:00:00.000"), ("image_url", None), ("text", "What happens?")]
    image = expanded.content[1]
    assert isinstance(image, ImagePart)
    assert decode(image.image_url.url).size == video.chunks[0].size
    engine = ScriptedEngine([render_output({"reasoning_content": "", "content": "a clip"})])
    engine.allow_local_files = True
    out = await Client(engine).chat([msg])
    assert out.message.content == "a clip"
    assert "<|sep|>00:00:00.000<|kimi_image_placeholder|>What happens?<|close|>" in engine.calls[0].prompt


async def test_video_data_urls_need_no_opt_in_and_https_videos_are_a_typed_error() -> None:
    data_url = "data:video/mp4;base64," + base64.b64encode(CLIP.read_bytes()).decode("ascii")
    by_data = UserMessage(content=[VideoPart(video_url=VideoURL(url=data_url)), TextPart(text="What happens?")])
    by_path = UserMessage(content=[VideoPart(video_url=VideoURL(url=str(CLIP))), TextPart(text="What happens?")])
    (a,) = expand_videos([by_data])
    (b,) = expand_videos([by_path], allow_local_files=True)
    assert a.content == b.content  # the same timestamps and frames, from the bytes
    engine = ScriptedEngine([render_output({"reasoning_content": "", "content": "a clip"})])
    assert (await Client(engine).chat([by_data])).message.content == "a clip"
    web = UserMessage(content=[VideoPart(video_url=VideoURL(url="https://example.com/v.mp4"))])
    with pytest.raises(MediaError) as e:
        await Client(ScriptedEngine(["never"])).chat([web])
    assert str(e.value) == "video URLs are not fetched ('https://example.com/v.mp4'): download it and send a data: URL"


async def test_an_engine_never_expands_a_video_past_the_caps(tmp_path: Path) -> None:
    from tests.media.test_video_limits import a_day_apart

    data_url = "data:video/x-matroska;base64," + base64.b64encode(a_day_apart(tmp_path / "day.mkv").read_bytes()).decode()
    msg = UserMessage(content=[VideoPart(video_url=VideoURL(url=data_url))])
    engine = ScriptedEngine(["never"])
    with pytest.raises(VideoTooLongError, match=r"^the video gives 691,201 samples"):
        await Client(engine).chat([msg])
    assert engine.calls == []


def test_media_index_scans_each_message_once_and_follows_edits() -> None:
    from kimik3.formats.k3._codec import MediaIndex, media_scan

    index = MediaIndex()
    img = UserMessage(content=[ImagePart(image_url={"url": "a.png"}), TextPart(text="x")])  # type: ignore[arg-type]
    vid = UserMessage(content=[VideoPart(video_url=VideoURL(url="v.mp4"))])
    plain = UserMessage(content="hi")
    history = [plain, img]
    first = index.scan(history)
    assert [p.image_url.url for p in first.images] == ["a.png"] and not first.has_video
    history.append(vid)
    assert index.scan(history) == media_scan(history) and index.scan(history).has_video
    history[1] = plain  # an edit in the middle: rescanned from there
    assert index.scan(history) == media_scan(history) and index.scan(history).images == []
    assert index.scan([plain]) == media_scan([plain])
