"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa
${imports if imports else ""}
# Alter existing tables with `rebuild_table(name)` (views set aside, SQLite rebuild checked), not
# `op.batch_alter_table`; a downgrade that drops run history calls `refuse_data_loss` first.
from scaling_book.store.migration_helpers import rebuild_table, refuse_data_loss

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
