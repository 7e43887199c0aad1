"""The synthetic people: stick figures, each with its own hair, skin,
shirt, trousers and shoe colours, a shirt pattern, an optional bag and a
build, rendered as six cameras see them (colour gain, brightness,
background), in a pose (shift, scale, mirror) and with noise."""

import numpy as np
from PIL import Image, ImageDraw

NUM_CAMERAS = 6
BASE_SIZE = (64, 128)  # (width, height) of a rendered person


def identity(rng):
    """Random appearance attributes of one identity."""
    return {
        "hair": rng.integers(0, 256, 3), "skin": rng.integers(90, 256, 3),
        "shirt": rng.integers(0, 256, 3), "shirt2": rng.integers(0, 256, 3),
        "trousers": rng.integers(0, 256, 3), "shoes": rng.integers(0, 256, 3),
        "pattern": int(rng.integers(0, 4)), "bag": int(rng.integers(0, 3)),
        "bag_color": rng.integers(0, 256, 3),
        "width": float(rng.uniform(0.8, 1.2)),
        "legs": float(rng.uniform(0.85, 1.15)),
    }


def cameras(seed):
    """Per-camera colour gains, brightness and background colours."""
    rng = np.random.default_rng(seed)
    return [{"gain": rng.uniform(0.75, 1.25, 3), "offset": rng.uniform(-25, 25),
             "background": rng.integers(40, 220, 3)}
            for _ in range(NUM_CAMERAS)]


def render(person, camera, rng, size=BASE_SIZE):
    """Render one uint8 RGB image (H, W, 3) of ``person`` seen by ``camera``.

    ``person`` None renders a distractor: background and random clutter.
    """
    w, h = BASE_SIZE
    bg = np.asarray(camera["background"], np.float64)
    gradient = np.linspace(-30, 30, h)[:, None, None] * rng.uniform(-1, 1)
    canvas = Image.fromarray(np.clip(bg + gradient + np.zeros((h, w, 3)),
                                     0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(canvas)
    if person is None:
        for _ in range(int(rng.integers(2, 6))):
            x0, y0 = rng.integers(0, w), rng.integers(0, h)
            draw.rectangle([x0, y0, x0 + rng.integers(5, 30),
                            y0 + rng.integers(5, 50)],
                           fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    else:
        _draw_person(draw, person, rng, w, h)
    image = np.asarray(canvas, np.float64)
    image = image * camera["gain"] + camera["offset"]
    image += rng.normal(0.0, 8.0, image.shape)
    image = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    if size != BASE_SIZE:
        image = image.resize(size, Image.Resampling.BILINEAR)
    return np.asarray(image)


def _draw_person(draw, p, rng, w, h):
    def color(key):
        jitter = rng.integers(-12, 13, 3)
        return tuple(int(v) for v in np.clip(p[key] + jitter, 0, 255))

    scale = rng.uniform(0.9, 1.1)
    cx = w / 2 + rng.uniform(-5, 5)
    top = 6 + rng.uniform(-4, 4)
    half = 14 * p["width"] * scale
    head = 9 * scale
    torso_top = top + 2 * head
    torso_bottom = torso_top + 42 * scale
    feet = min(h - 2.0, torso_bottom + 46 * scale * p["legs"])

    # head and hair
    draw.ellipse([cx - head, top, cx + head, top + 2 * head], fill=color("skin"))
    draw.chord([cx - head, top - 1, cx + head, top + 2 * head], 180, 360,
               fill=color("hair"))
    # torso with its pattern
    torso = [cx - half, torso_top, cx + half, torso_bottom]
    draw.rectangle(torso, fill=color("shirt"))
    if p["pattern"] == 1:  # horizontal stripes
        for y in np.arange(torso_top, torso_bottom, 8 * scale):
            draw.rectangle([cx - half, y, cx + half, y + 3 * scale],
                           fill=color("shirt2"))
    elif p["pattern"] == 2:  # two-tone, split vertically
        draw.rectangle([cx, torso_top, cx + half, torso_bottom],
                       fill=color("shirt2"))
    elif p["pattern"] == 3:  # a logo block on the chest
        draw.rectangle([cx - half / 2, torso_top + 8, cx + half / 2,
                        torso_top + 22], fill=color("shirt2"))
    # arms
    for side in (-1, 1):
        x = cx + side * (half + 3)
        draw.rectangle([min(x, x - side * 5), torso_top + 2,
                        max(x, x - side * 5), torso_bottom - 4],
                       fill=color("shirt"))
    # legs and shoes
    for side in (-1, 1):
        x0 = cx + (side - 1) * half * 0.45 + side * 1.5
        draw.rectangle([x0, torso_bottom, x0 + half * 0.9, feet - 5],
                       fill=color("trousers"))
        draw.rectangle([x0, feet - 5, x0 + half * 0.9, feet],
                       fill=color("shoes"))
    # bag on one side
    if p["bag"]:
        side = -1 if p["bag"] == 1 else 1
        x = cx + side * (half + 4)
        draw.rectangle([min(x, x + side * 10), torso_top + 20,
                        max(x, x + side * 10), torso_top + 40],
                       fill=color("bag_color"))


def save(path, image):
    Image.fromarray(image).save(path, quality=90)


def people(rng, splits, look_alike, twin_seed):
    """Each identity of the ``splits`` (arrays of ids) drawn from ``rng``;
    with ``look_alike`` the second of each pair in a split is then made
    like the first (:func:`look_alike_of`), from its own stream seeded
    ``twin_seed``."""
    people = {pid: identity(rng) for pid in np.concatenate(splits)}
    if look_alike:
        twins = np.random.default_rng(twin_seed)
        for ids in splits:
            for first, second in zip(ids[0::2], ids[1::2]):
                people[second] = look_alike_of(people[first], twins,
                                               look_alike)
    return people


COLOUR_KEYS = ("hair", "skin", "shirt", "shirt2", "trousers", "shoes",
               "bag_color")


def look_alike_of(person, rng, spread):
    """A person built like ``person``, the same pattern and bag, whose
    colours each differ by a normal shift of ``spread`` per channel."""
    twin = dict(person)
    for key in COLOUR_KEYS:
        twin[key] = np.clip(person[key] + rng.normal(0.0, spread, 3), 0,
                            255).astype(int)
    return twin
