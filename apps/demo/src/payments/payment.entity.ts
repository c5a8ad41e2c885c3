import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** The demo's real work: one row per payment taken. A duplicate that slipped through would be a second row. */
@Entity({ name: 'demo_payments' })
export class Payment {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('integer')
  amount!: number;

  @Column('text')
  currency!: string;

  @Column('text', { nullable: true })
  orderId!: string | null;

  /** `http` or `amqp`: which door the request came through. */
  @Column('text')
  source!: string;

  @CreateDateColumn({ type: 'timestamptz' })
  createdAt!: Date;
}
