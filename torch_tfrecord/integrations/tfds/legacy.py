"""``features.json`` as TFDS wrote it before 4.0 (``{"type": ..., "content": ...}``), in the form
TFDS 4 writes (``{"pythonClassName": ..., "<field>": ...}``) that :mod:`.features` reads; pure.

TFDS 4 still reads the old form (``FeatureConnector.from_json``): a dataset prepared by TFDS 3
reads as it did. Each connector's ``content`` was its constructor's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import SpecError

__all__ = ["from_legacy"]


def _dimensions(content: Mapping[str, Any], default: list[Any] | None = None) -> dict[str, list[str]]:
    shape = content.get("shape", default or [])
    return {"dimensions": [str(-1 if d is None else int(d)) for d in shape]}


def _tensor(content: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "shape": _dimensions(content),
        "dtype": str(content.get("dtype", "float32")),
        "encoding": str(content.get("encoding") or "none"),
    }


def from_legacy(document: Mapping[str, Any], where: str = "features.json") -> dict[str, Any]:
    """One pre-4.0 connector (and those inside it) in the TFDS 4 form.

    A connector this does not know keeps its class name with its content under ``"legacy"``,
    which :func:`~.features.parse_features` names in its error.

    Raises:
        SpecError: the document is not a connector of the old form.
    """
    try:
        class_name = str(document["type"])
        content: Mapping[str, Any] = document.get("content") or {}
        kind = class_name.rsplit(".", 1)[-1]
        out: dict[str, Any] = {"pythonClassName": class_name}
        if kind == "FeaturesDict":
            out["featuresDict"] = {
                "features": {key: from_legacy(value, f"{where}/{key}") for key, value in content.items()}
            }
        elif kind in ("Sequence", "Dataset"):
            length = content.get("length")
            out["sequence"] = {
                "feature": from_legacy(content["feature"], where),
                "length": str(-1 if length is None else int(length)),
            }
        elif kind in ("Tensor", "Scalar"):
            out["tensor"] = _tensor(content)
        elif kind == "BBoxFeature":
            out["boundingBox"] = {"shape": _dimensions(content, [4]), "dtype": "float32"}
        elif kind == "ClassLabel":
            out["classLabel"] = {"numClasses": str(int(content["num_classes"]))}
        elif kind == "Text":
            out["text"] = {key: content[key] for key in ("encoder", "encoder_config") if content.get(key)}
        elif kind in ("Image", "LabeledImage", "Video"):
            body = {"shape": _dimensions(content), "dtype": str(content.get("dtype", "uint8"))}
            if content.get("encoding_format"):
                body["encodingFormat"] = str(content["encoding_format"])
            out["video" if kind == "Video" else "image"] = body
        elif kind == "Audio":
            out["audio"] = {
                **_tensor({"dtype": "int64", **content}),
                "fileFormat": content.get("file_format"),
                "sampleRate": content.get("sample_rate"),
                "lazyDecode": bool(content.get("lazy_decode")),
            }
        elif kind in ("Translation", "TranslationVariableLanguages"):
            out["translation"] = {
                "languages": list(content.get("languages", [])),
                "variableLanguagesPerExample": kind == "TranslationVariableLanguages",
            }
        else:
            out["legacy"] = dict(content)
        return out
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SpecError(f"{where}: not a features.json connector of TFDS before 4.0: {error!r}") from None
