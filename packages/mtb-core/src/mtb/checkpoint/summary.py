"""metadata.md and metadata_zh.md: a checkpoint's metadata.json for people, in English and Chinese.

Both are rendered from the same rows of the same document, so they never
disagree; only the labels and sentences are translated. They are not
payload (not in the file digests) and are rewritten from metadata.json by
any mtb that wants them back.
"""

from pathlib import Path

from mtb.checkpoint import layout
from mtb.reporting import write_atomic

LANGUAGES = {"en": layout.SUMMARIES[0], "zh": layout.SUMMARIES[1]}

#: (English label, Chinese label, value from the metadata document)
ROWS = (
    ("Step", "步数", lambda d: d["step"]),
    ("Tokens seen", "已训练 token 数", lambda d: f"{d['tokens_seen']:,}"),
    ("World size", "进程总数 (world size)", lambda d: d["world_size"]),
    ("Layout", "并行布局", lambda d: d.get("layout", {}).get("label", f"dp{d['world_size']}")),
    ("Strategy", "并行策略", lambda d: d["strategy"]),
    ("Precision", "精度", lambda d: d["precision"]),
    ("Checkpoint backend", "检查点后端", lambda d: d["backend"]),
    ("Created (UTC)", "创建时间 (UTC)", lambda d: d["created_utc"]),
    ("torch", "torch", lambda d: d["versions"].get("torch")),
    ("deepspeed", "deepspeed", lambda d: d["versions"].get("deepspeed") or "-"),
    ("Config fingerprint", "配置指纹", lambda d: f"`{d['config_fingerprint']}`"),
    ("RNG states of ranks", "已保存随机数状态的 rank", lambda d: _ranks(d)),
    ("Files", "文件", lambda d: f"{len(d['files'])}, {_bytes(d)} B"),
    ("Format version", "格式版本", lambda d: d["format_version"]),
)

TEXT = {
    "en": {
        "title": "Checkpoint {name}",
        "header": "| field | value |",
        "resume": (
            "Resume with `mtb run ... --checkpoint-dir DIR --resume {step}` (DIR: the folder "
            "holding {name}) and the same model, strategy, "
            "precision, micro-batch, accumulation, optimizer and seed; the total number of "
            "steps and the save cadence may change."
        ),
        "verify": "Check the files against their SHA256 digests: "
        "`mtb checkpoint verify DIR/{name}`.",
        "source": "Rendered from metadata.json, which is what mtb reads.",
    },
    "zh": {
        "title": "检查点 {name}",
        "header": "| 字段 | 值 |",
        "resume": (
            "继续训练:`mtb run ... --checkpoint-dir DIR --resume {step}`(DIR 为包含 {name} "
            "的目录),模型、并行策略、精度、micro-batch、"
            "梯度累积、优化器和随机种子须与保存时一致;总步数和保存间隔可以改变。"
        ),
        "verify": "按 SHA256 摘要核对文件:`mtb checkpoint verify DIR/{name}`。",
        "source": "本文由 metadata.json 生成;mtb 读取的是 metadata.json。",
    },
}


def _ranks(document: dict) -> str:
    ranks = document["contents"]["rng_ranks"]
    return ", ".join(map(str, ranks)) if ranks else "-"


def _bytes(document: dict) -> str:
    return f"{sum(f['bytes'] for f in document['files'].values()):,}"


def render(document: dict, name: str, language: str) -> str:
    text = TEXT[language]
    label = 0 if language == "en" else 1
    lines = [f"# {text['title'].format(name=name)}", "", text["header"], "|---|---|"]
    lines += [f"| {row[label]} | {row[2](document)} |" for row in ROWS]
    fill = {"name": name, "step": document["step"]}
    lines += ["", text["resume"].format(**fill), "", text["verify"].format(**fill), ""]
    lines += [text["source"], ""]
    return "\n".join(lines)


def write(step_dir: Path, document: dict, name: str) -> None:
    """Both summaries into ``step_dir`` (written atomically, before it is published)."""
    for language, filename in LANGUAGES.items():
        write_atomic(step_dir / filename, render(document, name, language))
