"""Memories in the user's language: multilingual-e5-small finds German, Spanish and Korean facts
from questions in the same language and in English, offline, through the public API (issue 19)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adk_memory import Client
from adk_memory.cli import app

# (English question, {language: (fact, question in that language)}), one personal fact each.
PROBE: list[tuple[str, dict[str, tuple[str, str]]]] = [
    (
        "What is my dog called?",
        {
            "de": ("Mein Hund heißt Bello und ist ein Dackel.", "Wie heißt mein Hund?"),
            "es": ("Mi perro se llama Toby y es un teckel.", "¿Cómo se llama mi perro?"),
            "ko": ("우리 강아지 이름은 초코이고 닥스훈트예요.", "우리 강아지 이름이 뭐예요?"),
        },
    ),
    (
        "Where does my sister live?",
        {
            "de": (
                "Meine Schwester wohnt seit drei Jahren in Hamburg.",
                "Wo lebt meine Schwester?",
            ),
            "es": ("Mi hermana vive en Sevilla desde hace tres años.", "¿Dónde vive mi hermana?"),
            "ko": ("제 여동생은 3년째 부산에 살고 있어요.", "제 여동생은 어디에 살아요?"),
        },
    ),
    (
        "What am I allergic to?",
        {
            "de": ("Ich bin allergisch gegen Erdnüsse.", "Wogegen bin ich allergisch?"),
            "es": ("Soy alérgico a los cacahuetes.", "¿A qué soy alérgico?"),
            "ko": ("저는 땅콩 알레르기가 있어요.", "제가 무슨 알레르기가 있죠?"),
        },
    ),
    (
        "What do I do for a living?",
        {
            "de": ("Ich arbeite als Krankenpfleger im Klinikum.", "Was ist mein Beruf?"),
            "es": ("Trabajo como enfermero en el hospital.", "¿En qué trabajo?"),
            "ko": ("저는 병원에서 간호사로 일해요.", "제 직업이 뭐예요?"),
        },
    ),
    (
        "Which sport do I play?",
        {
            "de": ("Jeden Samstag spiele ich Tennis im Verein.", "Welchen Sport treibe ich?"),
            "es": ("Juego al tenis todos los sábados en el club.", "¿Qué deporte practico?"),
            "ko": ("저는 매주 토요일에 동호회에서 테니스를 쳐요.", "제가 하는 운동이 뭐예요?"),
        },
    ),
    (
        "When is my birthday?",
        {
            "de": ("Mein Geburtstag ist am 14. März.", "Wann habe ich Geburtstag?"),
            "es": ("Mi cumpleaños es el 14 de marzo.", "¿Cuándo es mi cumpleaños?"),
            "ko": ("제 생일은 3월 14일이에요.", "제 생일이 언제예요?"),
        },
    ),
    (
        "What car do I drive?",
        {
            "de": ("Ich fahre einen alten blauen Volkswagen Golf.", "Was für ein Auto fahre ich?"),
            "es": ("Conduzco un viejo Volkswagen Golf azul.", "¿Qué coche tengo?"),
            "ko": ("저는 오래된 파란색 폭스바겐 골프를 타요.", "제 차는 무슨 차예요?"),
        },
    ),
    (
        "What is my favourite food?",
        {
            "de": ("Mein Lieblingsessen ist Käsespätzle.", "Was esse ich am liebsten?"),
            "es": ("Mi comida favorita es la paella de marisco.", "¿Cuál es mi plato preferido?"),
            "ko": ("제가 제일 좋아하는 음식은 김치찌개예요.", "제가 가장 좋아하는 음식은?"),
        },
    ),
    (
        "Which language am I learning?",
        {
            "de": ("Ich lerne seit Januar Japanisch.", "Welche Sprache lerne ich gerade?"),
            "es": ("Estoy aprendiendo japonés desde enero.", "¿Qué idioma estoy estudiando?"),
            "ko": ("저는 1월부터 일본어를 배우고 있어요.", "제가 요즘 배우는 언어는 뭐예요?"),
        },
    ),
    (
        "How many children do I have?",
        {
            "de": ("Ich habe zwei Töchter und einen Sohn.", "Wie viele Kinder habe ich?"),
            "es": ("Tengo dos hijas y un hijo.", "¿Cuántos hijos tengo?"),
            "ko": ("저는 딸 둘과 아들 하나가 있어요.", "제 아이는 몇 명이에요?"),
        },
    ),
]
LANGUAGES = ("de", "es", "ko")
SCOPE = {"user_id": "u1"}
MIN_RECALL_AT_1 = 0.8


@pytest.fixture
def client(offline: None) -> Iterator[Client]:
    with Client(uri="memory://multilingual") as made:
        yield made


def recall_at_1(
    client: Client, bank: str, scope: dict[str, str], pairs: list[tuple[str, str]]
) -> float:
    found = 0
    for question, fact in pairs:
        hits = list(
            client.memory_banks.memories.retrieve(
                name=bank,
                scope=scope,
                similarity_search_params={"search_query": question, "top_k": 1},
            )
        )
        found += bool(hits) and hits[0].memory.fact == fact
    return found / len(pairs)


@pytest.mark.slow
@pytest.mark.parametrize("hybrid", [False, True], ids=["dense", "hybrid"])
@pytest.mark.parametrize("model", ["multilingual-e5-small", "intfloat/multilingual-e5-small"])
def test_multilingual_bank_finds_facts_from_same_language_and_english_questions(
    client: Client, model: str, hybrid: bool
) -> None:
    bank = client.memory_banks.create(
        managed_semantic_memory_config={"similarity_search_config": {"embedding_model": model}},
        extensions={"retrieval": {"mode": "hybrid"}} if hybrid else None,
    ).name
    recorded = client.memory_banks.get(name=bank).managed_semantic_memory_config
    assert recorded.similarity_search_config.embedding_model == model
    recalls: dict[str, float] = {}
    for language in LANGUAGES:
        scope = {"user_id": f"user-{language}"}
        for _, versions in PROBE:
            client.memory_banks.memories.create(name=bank, fact=versions[language][0], scope=scope)
        own = [(versions[language][1], versions[language][0]) for _, versions in PROBE]
        english = [(question, versions[language][0]) for question, versions in PROBE]
        recalls[f"{language}/{language}"] = recall_at_1(client, bank, scope, own)
        recalls[f"en/{language}"] = recall_at_1(client, bank, scope, english)
    assert all(recall >= MIN_RECALL_AT_1 for recall in recalls.values()), str(recalls)


def test_client_default_model_gives_new_banks_multilingual_e5() -> None:
    with Client(uri="memory://", embedding_model="intfloat/multilingual-e5-small") as client:
        bank = client.memory_banks.create().name
        recorded = client.memory_banks.get(name=bank).managed_semantic_memory_config
    assert recorded.similarity_search_config.embedding_model == "multilingual-e5-small"


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
def test_an_english_bank_reembedded_to_multilingual_e5_finds_korean_facts(tmp_path: Path) -> None:
    """The README's way to move an existing bank: `adk-memory reembed -b B --model ...`."""
    uri = f"chroma://{tmp_path / 'chroma'}"
    with Client(uri=uri) as client:
        bank = client.memory_banks.create(
            memory_bank_id="korean",
            managed_semantic_memory_config={
                "similarity_search_config": {"embedding_model": "hash-64"}
            },
        ).name
        for _, versions in PROBE:
            client.memory_banks.memories.create(name=bank, fact=versions["ko"][0], scope=SCOPE)
    result = CliRunner().invoke(
        app, ["reembed", "--uri", uri, "--bank", "korean", "--model", "multilingual-e5-small"]
    )
    assert result.exit_code == 0, result.stderr
    assert "now uses multilingual-e5-small (384 dimensions): 10 memories re-embedded" in (
        result.stdout
    )
    with Client(uri=uri) as client:
        english = [(question, versions["ko"][0]) for question, versions in PROBE]
        assert recall_at_1(client, bank, SCOPE, english) >= MIN_RECALL_AT_1
